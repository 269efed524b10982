use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;

fn plan(value: Value) -> ExecPlan {
    match ExecPlan::from_json(&value) {
        Ok(plan) => plan,
        Err(e) => panic!("plan refused: {e}"),
    }
}

fn refused(value: Value) -> String {
    match ExecPlan::from_json(&value) {
        Ok(_) => panic!("plan accepted: {value}"),
        Err(e) => e.to_string(),
    }
}

fn seed_example() -> Value {
    json!({
        "id": "refactor-auth-001",
        "title": "Refactor Auth Module",
        "variables": {"module_path": "src/auth/handler.py"},
        "steps": [
            {"index": "1", "title": "Read auth module", "tool": "read_file",
             "args": {"path": "${module_path}"}, "depends_on": [], "result_variable": "auth_code"},
            {"index": "2", "title": "Find all usages", "tool": "search_code",
             "args": {"query": "from auth.handler import"}, "depends_on": [], "result_variable": "usages"},
            {"index": "3", "title": "Write refactored module", "tool": "write_file",
             "args": {"path": "${module_path}", "content": "refactored code"},
             "depends_on": ["1", "2"], "result_variable": "write_result"},
            {"index": "4", "title": "Run tests", "tool": "run_tests",
             "args": {"path": "tests/auth/"}, "depends_on": ["3"], "result_variable": "test_results"}
        ]
    })
}

fn names(plan: &ExecPlan) -> Vec<Vec<&str>> {
    plan.batches()
        .iter()
        .map(|b| b.iter().map(|&i| plan.steps[i].index.as_str()).collect())
        .collect()
}

#[test]
fn the_seed_example_batches_and_renders_as_the_seed_shows() {
    let plan = plan(seed_example());
    assert_eq!(names(&plan), vec![vec!["1", "2"], vec!["3"], vec!["4"]]);
    let expected = [
        "  ○ 1. Read auth module                    [read_file] ∥",
        "  ○ 2. Find all usages                     [search_code] ∥",
        "",
        "  ○ 3. Write refactored module             [write_file]  ← after: 1, 2",
        "",
        "  ○ 4. Run tests                           [run_tests]  ← after: 3",
    ]
    .join("\n");
    assert_eq!(render_dag(&plan, |_| StepMark::Pending), expected);
    let marks = [
        StepMark::Completed,
        StepMark::Failed,
        StepMark::Running,
        StepMark::Pending,
    ];
    let live = render_dag(&plan, |i| marks[i]);
    let firsts: Vec<char> = live
        .lines()
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.chars().nth(2))
        .collect();
    assert_eq!(firsts, vec!['●', '✗', '◉', '○']);
}

#[test]
fn an_empty_plan_renders_as_the_seed_says() {
    let plan = plan(json!({"title": "Nothing", "steps": []}));
    assert_eq!(render_dag(&plan, |_| StepMark::Pending), "  (empty plan)");
}

#[test]
fn the_diamond_runs_in_three_batches() {
    let plan = plan(json!({"title": "Diamond", "steps": [
        {"index": "1", "title": "Fetch", "tool": "t", "depends_on": []},
        {"index": "2", "title": "Parse A", "tool": "t", "depends_on": ["1"]},
        {"index": "3", "title": "Parse B", "tool": "t", "depends_on": ["1"]},
        {"index": "4", "title": "Merge", "tool": "t", "depends_on": ["2", "3"]}
    ]}));
    assert_eq!(names(&plan), vec![vec!["1"], vec!["2", "3"], vec!["4"]]);
}

#[test]
fn batches_sort_indexes_as_numbers() {
    let steps: Vec<Value> = (1..=12)
        .rev()
        .map(|i| json!({"index": i.to_string(), "title": "s", "tool": "t"}))
        .collect();
    let plan = plan(json!({"title": "Wide", "steps": steps}));
    let expected: Vec<String> = (1..=12).map(|i| i.to_string()).collect();
    assert_eq!(names(&plan)[0], expected);
}

#[test]
fn a_cycle_is_an_error_naming_it() {
    let message = refused(json!({"title": "Loop", "steps": [
        {"index": "1", "title": "a", "tool": "t", "depends_on": ["3"]},
        {"index": "2", "title": "b", "tool": "t", "depends_on": ["1"]},
        {"index": "3", "title": "c", "tool": "t", "depends_on": ["2"]},
        {"index": "4", "title": "d", "tool": "t"}
    ]}));
    assert!(
        message.starts_with("steps: dependency cycle: "),
        "{message}"
    );
    assert!(message.contains("1 → 3 → 2 → 1"), "{message}");
}

#[test]
fn validation_errors_name_the_field() {
    let cases = [
        (json!({"steps": []}), "title: missing title"),
        (
            json!({"title": "T", "steps": [{"index": "1", "tool": "t"}]}),
            "steps[0].title: missing title",
        ),
        (
            json!({"title": "T", "steps": [{"index": "1", "title": "a"}]}),
            "steps[0].tool: missing tool",
        ),
        (
            json!({"title": "T", "steps": [
                {"index": "1", "title": "a", "tool": "t"},
                {"index": "1", "title": "b", "tool": "t"}]}),
            "steps[1].index: duplicate index \"1\": steps[0] has it too",
        ),
        (
            json!({"title": "T", "steps": [
                {"index": "1", "title": "a", "tool": "t", "depends_on": ["9"]}]}),
            "steps[0].depends_on[0]: step 1 depends on \"9\", which no step has as its index",
        ),
        (
            json!({"title": "T", "steps": [
                {"index": "1", "title": "a", "tool": "t", "depends_on": ["1"]}]}),
            "steps[0].depends_on[0]: step 1 depends on itself",
        ),
        (
            json!({"title": "T", "steps": [{"index": "1", "title": "a", "tool": "t", "args": [1]}]}),
            "steps[0].args: must be an object (got array)",
        ),
        (json!({"title": "T"}), "steps: missing steps"),
        (json!([1]), "a plan must be a JSON object (got array)"),
        (
            json!({"title": "T", "steps": [
                {"index": "1", "title": "a", "tool": "t", "result_variable": "x"},
                {"index": "2", "title": "b", "tool": "t", "result_variable": "x"}]}),
            "steps[1].result_variable: \"x\" is already bound by step 1 (steps[0]); give each result its own variable",
        ),
        (
            json!({"title": "T", "steps": [{"index": "One", "title": "a", "tool": "t"}]}),
            "steps[0].index: \"One\" may hold only lowercase letters, digits, '-' and '_' (found 'O')",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(refused(input), expected);
    }
}

#[test]
fn unknown_tools_are_the_seeds_error() {
    let plan = plan(seed_example());
    let known = |tool: &str| {
        if tool == "read_file" {
            Ok(())
        } else {
            Err(vec!["fs__read_file".to_owned(), "read_file".to_owned()])
        }
    };
    let error = plan.check_tools(known).map(|_| ()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "steps[1].tool: Unknown tool: search_code. Available: fs__read_file, read_file"
    );
}

#[test]
fn a_zero_based_position_past_every_step_is_an_unknown_dependency() {
    for position in ["3", "18446744073709551615"] {
        let value = json!({"title": "G", "steps": [
            {"title": "a", "tool": "t"},
            {"title": "b", "tool": "t", "depends_on": [position.parse::<u64>().expect("n")]}
        ]});
        let error = ExecPlan::from_json(&value).expect_err("no such step");
        assert!(
            error.to_string().contains("depends_on"),
            "{position}: {error}"
        );
    }
}

#[test]
fn generators_shapes_are_normalised() {
    // tool_calls per step, no indexes, 0-based positions as dependencies.
    let generated = plan(json!({"title": "Generated", "steps": [
        {"title": "Fetch", "tool_calls": [{"name": "fetch", "args": {"u": 1}}]},
        {"title": "Parse", "tool_calls": [{"name": "parse", "args": {}}], "depends_on": [0]},
        {"title": "Save", "tool_calls": [{"name": "save"}], "depends_on": [0, 1]}
    ]}));
    let steps: Vec<(&str, &str, Vec<&str>)> = generated
        .steps
        .iter()
        .map(|s| {
            (
                s.index.as_str(),
                s.tool.as_str(),
                s.depends_on.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            ("1", "fetch", vec![]),
            ("2", "parse", vec!["1"]),
            ("3", "save", vec!["1", "2"])
        ]
    );
    assert_eq!(
        generated.steps[0].args,
        json!({"u": 1}).as_object().cloned().unwrap_or_default()
    );
    // Numbers are positions even when none is 0; text is an index.
    let positions = plan(json!({"title": "G", "steps": [
        {"title": "a", "tool": "t"}, {"title": "b", "tool": "t"},
        {"title": "c", "tool": "t", "depends_on": [1, "1"]}]}));
    assert_eq!(positions.steps[2].depends_on, vec!["2", "1"]);
    // A top-level tool_calls list is a chain-free list of calls.
    let calls = plan(json!({"title": "Calls", "tool_calls": [
        {"name": "echo", "args": {"text": "hi"}}]}));
    assert_eq!(calls.steps[0].tool, "echo");
    assert_eq!(calls.steps[0].title, "echo");
    // The written shape reads back to the same plan.
    let again = plan(generated.to_json());
    assert_eq!(again, generated);
}

#[test]
fn reading_a_variable_waits_for_the_step_that_binds_it() {
    let plan = plan(json!({"title": "Implicit", "steps": [
        {"index": "1", "title": "a", "tool": "t", "result_variable": "user"},
        {"index": "2", "title": "b", "tool": "t", "args": {"name": "${user.name}"}}
    ]}));
    assert_eq!(names(&plan), vec![vec!["1"], vec!["2"]]);
    assert!(render_dag(&plan, |_| StepMark::Pending).contains("← after: 1"));
}

fn vars() -> Map<String, Value> {
    json!({
        "users": [{"id": 1}, {"id": 2}],
        "api": {"host": "api.example.com", "version": "v2", "port": 8443},
        "count": 3,
        "flag": true,
        "nothing": null,
        "name": "Ada"
    })
    .as_object()
    .cloned()
    .unwrap_or_default()
}

#[test]
fn variables_resolve_as_the_seed_documents() {
    let cases = [
        // Type-preserving.
        (json!("${users}"), json!([{"id": 1}, {"id": 2}])),
        (json!("${count}"), json!(3)),
        (json!("${flag}"), json!(true)),
        (json!("${nothing}"), json!(null)),
        // Dotted.
        (json!("${api.host}"), json!("api.example.com")),
        (json!("${api.port}"), json!(8443)),
        // Templates are strings.
        (
            json!("https://${api.host}/${api.version}/users"),
            json!("https://api.example.com/v2/users"),
        ),
        (json!("n=${count}"), json!("n=3")),
        (json!("${name}${name}"), json!("AdaAda")),
        (
            json!("all: ${users}"),
            json!("all: [{\"id\":1},{\"id\":2}]"),
        ),
        // Unresolved stays literal.
        (json!("${missing}"), json!("${missing}")),
        (json!("${api.nope}"), json!("${api.nope}")),
        (json!("${name.first}"), json!("${name.first}")),
        (json!("x ${missing} ${name}"), json!("x ${missing} Ada")),
        (json!("no refs"), json!("no refs")),
        (json!("${"), json!("${")),
        (json!("${}"), json!("${}")),
        // Recursion into containers; other values untouched.
        (
            json!({"a": ["${count}", {"b": "${api.version}"}], "n": 5}),
            json!({"a": [3, {"b": "v2"}], "n": 5}),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(resolve(&input, &vars()), expected, "resolving {input}");
    }
}

#[test]
fn call_time_variables_override_the_plans() {
    let mut variables = vars();
    let overrides = json!({"name": "Grace"});
    for (k, v) in overrides.as_object().into_iter().flatten() {
        variables.insert(k.clone(), v.clone());
    }
    assert_eq!(resolve(&json!("hi ${name}"), &variables), json!("hi Grace"));
}

/// A reference layering: a step's layer is one more than its deepest
/// dependency's.
fn reference_layers(deps: &[Vec<usize>], index: &[String]) -> Vec<Vec<String>> {
    let mut depth: Vec<Option<usize>> = vec![None; deps.len()];
    fn depth_of(i: usize, deps: &[Vec<usize>], depth: &mut Vec<Option<usize>>) -> usize {
        if let Some(d) = depth[i] {
            return d;
        }
        let d = deps[i]
            .iter()
            .map(|&n| depth_of(n, deps, depth) + 1)
            .max()
            .unwrap_or(0);
        depth[i] = Some(d);
        d
    }
    let mut layers: Vec<Vec<String>> = Vec::new();
    for (i, name) in index.iter().enumerate().take(deps.len()) {
        let d = depth_of(i, deps, &mut depth);
        if layers.len() <= d {
            layers.resize_with(d + 1, Vec::new);
        }
        layers[d].push(name.clone());
    }
    for layer in &mut layers {
        layer.sort_by(|a, b| index_order(a, b));
    }
    layers
}

proptest! {
    #[test]
    fn batches_equal_a_reference_layering(
        n in 1usize..40,
        edges in proptest::collection::vec((0usize..40, 0usize..40), 0..120),
        order in proptest::collection::vec(any::<u32>(), 40),
    ) {
        // A DAG over 0..n (edges from later to earlier), written in a
        // shuffled order with indexes that are not positions.
        let mut deps: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (a, b) in edges {
            let (a, b) = (a % n, b % n);
            if a > b && !deps[a].contains(&b) {
                deps[a].push(b);
            }
        }
        let index: Vec<String> = (0..n).map(|i| (i * 7 % 101 + 1).to_string()).collect();
        let mut written: Vec<usize> = (0..n).collect();
        written.sort_by_key(|&i| order[i]);
        let steps: Vec<Value> = written
            .iter()
            .map(|&i| json!({
                "index": index[i],
                "title": format!("step {i}"),
                "tool": "t",
                "depends_on": deps[i].iter().map(|&d| index[d].clone()).collect::<Vec<_>>(),
            }))
            .collect();
        let plan = plan(json!({"title": "Random", "steps": steps}));
        let got: Vec<Vec<String>> = plan
            .batches()
            .iter()
            .map(|b| b.iter().map(|&i| plan.steps[i].index.clone()).collect())
            .collect();
        prop_assert_eq!(got, reference_layers(&deps, &index));
    }

    #[test]
    fn a_back_edge_is_always_a_named_cycle(n in 2usize..30, from in 0usize..30, to in 0usize..30) {
        // A chain 0 <- 1 <- ... <- n-1 plus one edge making a cycle.
        let (low, high) = ((from % n).min(to % n), (from % n).max(to % n));
        prop_assume!(low != high);
        let steps: Vec<Value> = (0..n)
            .map(|i| {
                let mut deps: Vec<String> = Vec::new();
                if i > 0 { deps.push(i.to_string()); }
                if i == low { deps.push((high + 1).to_string()); }
                json!({"index": (i + 1).to_string(), "title": "s", "tool": "t", "depends_on": deps})
            })
            .collect();
        let message = refused(json!({"title": "Cycle", "steps": steps}));
        prop_assert!(message.starts_with("steps: dependency cycle: "), "{}", message);
    }

    #[test]
    fn resolving_never_panics_and_leaves_reference_free_text_alone(text in "\\PC{0,40}") {
        let resolved = resolve(&Value::from(text.clone()), &vars());
        if !text.contains("${") {
            prop_assert_eq!(resolved, Value::from(text));
        }
    }
}

#[test]
fn whole_string_references_to_values_that_are_not_text_are_typed_arguments() {
    let variables = json!({"n": 5, "name": "x", "p": {"ok": true}, "list": [1]});
    let variables = variables.as_object().cloned().unwrap_or_default();
    let args = json!({
        "a": "${n}", "b": "n = ${n}", "c": "${name}", "d": "${p.ok}",
        "e": "${missing}", "f": "${list}", "g": 3
    });
    let args = args.as_object().cloned().unwrap_or_default();
    let typed: Vec<(String, String, &str)> = typed_args(&args, &variables)
        .into_iter()
        .map(|t| (t.arg, t.path, t.kind))
        .collect();
    let expected = [
        ("a", "n", "number"),
        ("d", "p.ok", "boolean"),
        ("f", "list", "array"),
    ];
    let expected: Vec<(String, String, &str)> = expected
        .iter()
        .map(|(a, p, k)| ((*a).to_owned(), (*p).to_owned(), *k))
        .collect();
    assert_eq!(typed, expected);
    let hint = typed_args(&args, &variables)[2].hint();
    assert_eq!(
        hint,
        "argument \"f\" was \"${list}\", which passes list as an array, not text; to pass it as text write it with other text, e.g. \"f = ${list}\""
    );
}

#[test]
fn what_a_revised_plan_revises_is_kept_and_checked() {
    let mut value = json!({"title": "t", "steps": [{"title": "a", "tool": "x__y"}],
        "revises": {"plan": "p1", "run": "r1", "number": 2, "step": "3", "error": "boom"}});
    let read = plan(value.clone());
    let revises = read.revises.clone().expect("revises");
    assert_eq!((revises.number, revises.step.as_str()), (2, "3"));
    assert_eq!(plan(read.to_json()), read, "it reads back the same");
    value["revises"]["number"] = json!(0);
    assert_eq!(
        refused(value.clone()),
        "revises.number: must be a whole number from 1"
    );
    value["revises"] = json!({"plan": "p1"});
    assert!(refused(value).starts_with("revises.run: missing run"));
}

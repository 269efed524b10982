use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

fn id(text: &str) -> StepId {
    StepId::parse(text).expect("step id")
}

fn step(name: &str, needs: &[&str]) -> StepDef {
    StepDef {
        id: id(name),
        title: name.to_uppercase(),
        needs: needs.iter().map(|n| id(n)).collect(),
        action: Action::Model {
            prompt: format!("do {name}"),
            answer: None,
        },
    }
}

fn ids(list: &[&str]) -> Vec<StepId> {
    list.iter().map(|n| id(n)).collect()
}

/// intake -> (risks, team) -> report; `extra` hangs off intake alone.
fn diamond() -> Pipeline {
    Pipeline::new(
        "project-plan",
        1,
        vec![
            step("intake", &[]),
            step("risks", &["intake"]),
            step("team", &["intake"]),
            step("report", &["risks", "team"]),
            step("extra", &["intake"]),
        ],
    )
    .expect("a valid pipeline")
}

#[test]
fn step_ids_are_file_and_url_safe() {
    assert!(StepId::parse("work_breakdown-2").is_ok());
    for bad in ["", "Risks", "2nd", "a b", "../x", &"a".repeat(65)] {
        assert!(StepId::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn definition_errors_name_the_step() {
    let error = |steps: Vec<StepDef>| Pipeline::new("p", 1, steps).unwrap_err().to_string();
    assert_eq!(error(vec![]), "steps: must hold 1 to 500 steps (got 0)");
    assert_eq!(
        error(vec![step("a", &[]), step("b", &[]), step("a", &[])]),
        "steps[2].id: \"a\" is already the id of steps[0]"
    );
    assert_eq!(
        error(vec![step("a", &[]), step("b", &["c"])]),
        "steps[1].needs: \"b\" needs \"c\", which no step defines"
    );
    assert_eq!(
        error(vec![step("a", &["a"])]),
        "steps[0].needs: \"a\" needs itself"
    );
    assert_eq!(
        error(vec![step("a", &[]), step("b", &["a", "a"])]),
        "steps[1].needs: \"b\" needs \"a\" twice"
    );
    assert_eq!(
        error(vec![
            step("a", &["c"]),
            step("b", &["a"]),
            step("c", &["b"]),
            step("d", &["a"]),
        ]),
        "steps: needs form a cycle (each needs the next): a -> c -> b -> a"
    );
}

#[test]
fn closures_downstream_and_batches() {
    let p = diamond();
    assert_eq!(
        p.closure(&id("report")),
        Some(ids(&["intake", "risks", "team", "report"]))
    );
    assert_eq!(p.closure(&id("risks")), Some(ids(&["intake", "risks"])));
    assert_eq!(p.downstream(&id("risks")), Some(ids(&["risks", "report"])));
    assert_eq!(
        p.downstream(&id("intake")),
        Some(ids(&["intake", "risks", "team", "report", "extra"]))
    );
    assert_eq!(
        p.batches(&id("report")),
        Some(vec![
            ids(&["intake"]),
            ids(&["risks", "team"]),
            ids(&["report"])
        ])
    );
    assert_eq!(p.closure(&id("missing")), None);
}

#[test]
fn the_input_hash_covers_context_definition_and_inputs() {
    let p = diamond();
    let a = BTreeMap::from([(id("intake"), ContentHash::of("one"))]);
    let b = BTreeMap::from([(id("intake"), ContentHash::of("two"))]);
    let risks = id("risks");
    let base = p.input_hash(b"prompt", &risks, &a).expect("inputs known");
    assert_eq!(p.input_hash(b"prompt", &risks, &a), Some(base));
    assert_ne!(p.input_hash(b"other prompt", &risks, &a), Some(base));
    assert_ne!(p.input_hash(b"prompt", &risks, &b), Some(base));
    assert_ne!(p.input_hash(b"prompt", &id("team"), &a), Some(base));
    let mut changed = diamond().steps().to_vec();
    changed[1].action = Action::Model {
        prompt: "do risks better".into(),
        answer: None,
    };
    let changed = Pipeline::new("project-plan", 2, changed).expect("valid");
    assert_ne!(changed.input_hash(b"prompt", &risks, &a), Some(base));
    // Requiring an answer shape is a change of definition too.
    let mut checked = diamond().steps().to_vec();
    checked[1].action = Action::Model {
        prompt: "do risks".into(),
        answer: Some("json".into()),
    };
    let checked = Pipeline::new("project-plan", 2, checked).expect("valid");
    assert_ne!(checked.input_hash(b"prompt", &risks, &a), Some(base));
    assert_eq!(p.input_hash(b"prompt", &risks, &BTreeMap::new()), None);
}

/// A deterministic model: the artifact is a function of the input hash.
fn model(input: &ContentHash) -> ContentHash {
    ContentHash(Sha256::digest(input.0).into())
}

/// Runs toward `target` until the closure is settled or `budget` steps have
/// run (a crash). Each round starts every step the schedule offers, then
/// completes them in the order given by `finish_order`. Returns the steps
/// run, in order; successes go into `recorded`.
fn run(
    pipeline: &Pipeline,
    target: &StepId,
    recorded: &mut BTreeMap<StepId, Success>,
    budget: usize,
    reverse_rounds: bool,
) -> (Vec<StepId>, BTreeMap<StepId, ContentHash>) {
    let schedule = Schedule::new(pipeline, b"context", target).expect("target");
    let mut settled = BTreeMap::new();
    let mut ran = Vec::new();
    loop {
        let mut decisions = schedule.next(&settled, recorded, &BTreeSet::new());
        if decisions.is_empty() {
            assert_eq!(
                settled.len(),
                schedule.steps().len(),
                "stuck before the end"
            );
            return (ran, settled);
        }
        if reverse_rounds {
            decisions.reverse();
        }
        for decision in decisions {
            match decision {
                Decision::Fresh(step) => {
                    settled.insert(step.clone(), recorded[&step].artifact);
                }
                Decision::Run(step, input) => {
                    if ran.len() == budget {
                        return (ran, settled);
                    }
                    let artifact = model(&input);
                    recorded.insert(step.clone(), Success { input, artifact });
                    settled.insert(step.clone(), artifact);
                    ran.push(step);
                }
            }
        }
    }
}

/// A random DAG: step `s<i>` needs a random subset of earlier steps.
fn arbitrary_pipeline() -> impl Strategy<Value = Pipeline> {
    (1usize..24).prop_flat_map(|n| {
        proptest::collection::vec(proptest::collection::vec(any::<bool>(), n), n).prop_map(
            move |edges| {
                let steps = (0..n)
                    .map(|i| {
                        let needs: Vec<String> = (0..i)
                            .filter(|&j| edges[i][j] && (i + j) % 3 != 0)
                            .map(|j| format!("s{j}"))
                            .collect();
                        let needs: Vec<&str> = needs.iter().map(String::as_str).collect();
                        step(&format!("s{i}"), &needs)
                    })
                    .collect();
                Pipeline::new("random", 1, steps).expect("acyclic by construction")
            },
        )
    })
}

proptest! {
    /// Stop (or crash) anywhere, maybe edit one recorded artifact, resume:
    /// exactly the steps that are missing or downstream of the edit run,
    /// each once, and the artifacts equal those of an uninterrupted run (on
    /// the edited artifact, if any).
    #[test]
    fn resume_runs_exactly_what_is_missing_or_downstream_of_an_edit(
        pipeline in arbitrary_pipeline(),
        target_pick in any::<prop::sample::Index>(),
        crash_after in 0usize..30,
        edit_pick in proptest::option::of(any::<prop::sample::Index>()),
        reverse in any::<bool>(),
    ) {
        let target = pipeline.steps()[target_pick.index(pipeline.steps().len())].id.clone();
        let closure = pipeline.closure(&target).expect("target");

        let mut recorded = BTreeMap::new();
        let (first, _) = run(&pipeline, &target, &mut recorded, crash_after, reverse);
        let done: BTreeSet<StepId> = first.iter().cloned().collect();

        // A person replaces one finished step's artifact.
        let edited = edit_pick.filter(|_| !first.is_empty()).map(|pick| {
            let step = first[pick.index(first.len())].clone();
            if let Some(success) = recorded.get_mut(&step) {
                success.artifact = ContentHash::of(&format!("edited {step}"));
            }
            step
        });

        let (resumed, artifacts) = run(&pipeline, &target, &mut recorded, usize::MAX, !reverse);
        let once: BTreeSet<StepId> = resumed.iter().cloned().collect();
        prop_assert_eq!(once.len(), resumed.len(), "a step ran twice: {:?}", resumed);

        let mut expected: BTreeSet<StepId> =
            closure.iter().filter(|s| !done.contains(*s)).cloned().collect();
        if let Some(edited) = &edited {
            let downstream = pipeline.downstream(edited).expect("step");
            expected.extend(
                downstream.into_iter().filter(|s| s != edited && closure.contains(s)),
            );
        }
        prop_assert_eq!(once, expected);

        // The reference: one uninterrupted run, the edit (if any) applied
        // as the step's artifact.
        let reference = BTreeMap::new();
        let schedule = Schedule::new(&pipeline, b"context", &target).expect("target");
        let mut settled = BTreeMap::new();
        while settled.len() < closure.len() {
            for decision in schedule.next(&settled, &reference, &BTreeSet::new()) {
                let Decision::Run(step, input) = decision else {
                    unreachable!("nothing is recorded before the reference run");
                };
                let artifact = match &edited {
                    Some(e) if *e == step => ContentHash::of(&format!("edited {step}")),
                    _ => model(&input),
                };
                settled.insert(step.clone(), artifact);
            }
        }
        prop_assert_eq!(artifacts, settled);
    }

    /// Progress counts settled steps of the closure and never decreases as
    /// a run settles more.
    #[test]
    fn progress_grows_to_one_hundred(pipeline in arbitrary_pipeline(), pick in any::<prop::sample::Index>()) {
        let target = pipeline.steps()[pick.index(pipeline.steps().len())].id.clone();
        let schedule = Schedule::new(&pipeline, b"context", &target).expect("target");
        let mut settled = BTreeMap::new();
        let mut last = schedule.progress(&settled);
        prop_assert_eq!(last, 0.0);
        loop {
            let decisions = schedule.next(&settled, &BTreeMap::new(), &BTreeSet::new());
            if decisions.is_empty() {
                break;
            }
            for decision in decisions {
                if let Decision::Run(step, input) = decision {
                    settled.insert(step, model(&input));
                    let now = schedule.progress(&settled);
                    prop_assert!(now > last);
                    last = now;
                }
            }
        }
        prop_assert_eq!(last, 100.0);
    }
}

#[test]
fn running_steps_are_not_offered_again() {
    let p = diamond();
    let schedule = Schedule::new(&p, b"c", &id("report")).expect("target");
    let settled = BTreeMap::from([(id("intake"), ContentHash::of("x"))]);
    let running = BTreeSet::from([id("risks")]);
    let offered: Vec<StepId> = schedule
        .next(&settled, &BTreeMap::new(), &running)
        .into_iter()
        .map(|d| match d {
            Decision::Fresh(s) | Decision::Run(s, _) => s,
        })
        .collect();
    assert_eq!(offered, ids(&["team"]));
}

//! The `PLANB_*` settings and the error codes as every front door reads
//! them: each setting's bounds, a refusal naming its variable, the codes'
//! names and exit statuses, and what a store's refusal becomes.

use std::time::Duration;

use planb_app::settings::{
    DEFAULT_ANSWER_TIMEOUT, DEFAULT_HAND_BACK, DEFAULT_PROGRESS_INTERVAL, ServerSettings,
    SettingError, Settings,
};
use planb_app::{Error, ErrorCode};
use planb_core::{Rejection, SessionId};
use planb_projections::StoreError;
use planb_tests::fixtures::new_uuid;

/// Reads `pairs` as the environment.
fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let owned: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| {
        owned
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

fn settings(pairs: &[(&str, &str)]) -> Result<Settings, SettingError> {
    Settings::from_vars(&vars(pairs))
}

fn server(pairs: &[(&str, &str)]) -> Result<ServerSettings, SettingError> {
    ServerSettings::from_vars(&vars(pairs))
}

#[test]
fn a_duration_in_seconds_is_taken_above_zero_up_to_a_year_and_refused_past_it() {
    let year = 365 * 86_400;
    for (given, expected) in [
        ("0.001", Duration::from_millis(1)),
        (" 2.5 ", Duration::from_millis(2500)),
        ("31536000", Duration::from_secs(year)),
    ] {
        let read = settings(&[("PLANB_INACTIVITY_SEC", given)]).expect(given);
        assert_eq!(read.inactivity, Some(expected), "{given:?}");
    }
    for given in ["31536000.5", "-1", "0", "NaN", "inf", "ten", "1s"] {
        let refused = settings(&[("PLANB_INACTIVITY_SEC", given)]).expect_err(given);
        assert_eq!(refused.variable, "PLANB_INACTIVITY_SEC");
        assert_eq!(
            refused.to_string(),
            format!(
                "PLANB_INACTIVITY_SEC: must be a number of seconds above 0 and at most a year (got {given:?})"
            )
        );
    }
}

#[test]
fn concurrency_is_a_whole_number_from_1_to_64() {
    for (given, expected) in [("1", 1), ("64", 64), (" 8 ", 8)] {
        let read = settings(&[("PLANB_CONCURRENCY", given)]).expect(given);
        assert_eq!(read.concurrency, Some(expected));
    }
    for given in ["0", "65", "2.5", "-3", "many"] {
        let refused = settings(&[("PLANB_CONCURRENCY", given)]).expect_err(given);
        assert_eq!(refused.variable, "PLANB_CONCURRENCY");
        assert_eq!(
            refused.problem,
            format!("must be a whole number from 1 to 64 (got {given:?})")
        );
    }
}

#[test]
fn a_refusal_names_the_first_unusable_setting_and_usable_ones_leave_the_rest_unset() {
    let refused = settings(&[
        ("PLANB_STEP_TIMEOUT_SEC", "soon"),
        ("PLANB_CONCURRENCY", "0"),
    ])
    .expect_err("two unusable settings");
    assert_eq!(refused.variable, "PLANB_STEP_TIMEOUT_SEC");
    let fine = settings(&[("PLANB_CONCURRENCY", "2"), ("PLANB_REDACT_PROMPTS", "0")]);
    let fine = fine.expect("usable");
    assert_eq!(
        fine,
        Settings {
            concurrency: Some(2),
            ..Settings::default()
        }
    );
}

#[test]
fn the_browser_is_opened_unless_ask_no_open_is_set_to_anything_but_0() {
    for (given, no_open) in [
        ("0", false),
        (" 0 ", false),
        ("", false),
        ("1", true),
        ("yes", true),
    ] {
        let read = server(&[("ASK_NO_OPEN", given)]).expect(given);
        assert_eq!(read.no_open, no_open, "{given:?}");
    }
    assert!(!server(&[]).expect("unset").no_open);
}

#[test]
fn the_server_s_waits_are_read_in_milliseconds_and_its_tool_groups_as_written() {
    let none = server(&[]).expect("none set");
    assert_eq!(none.answer_timeout, DEFAULT_ANSWER_TIMEOUT);
    assert_eq!(none.progress_interval, DEFAULT_PROGRESS_INTERVAL);
    assert_eq!(none.hand_back, DEFAULT_HAND_BACK);
    assert!(!none.browser_plan_names);
    let set = server(&[
        ("ASK_ANSWER_TIMEOUT_MS", "1500"),
        ("PLANB_PROGRESS_INTERVAL_MS", " 250 "),
        ("PLANB_TOOLS", "plans, asks"),
        ("PLANB_PORT", "0"),
    ])
    .expect("set");
    assert_eq!(set.answer_timeout, Duration::from_millis(1500));
    assert_eq!(set.progress_interval, Duration::from_millis(250));
    assert_eq!(set.tools.as_deref(), Some("plans, asks"));
    assert_eq!(set.port, 0);
    for (name, given) in [
        ("PLANB_HAND_BACK_MS", "-5"),
        ("ASK_ANSWER_TIMEOUT_MS", "1.5"),
    ] {
        let refused = server(&[(name, given)]).expect_err(name);
        assert_eq!(refused.variable, name);
        assert_eq!(
            refused.problem,
            format!("expected a positive number of milliseconds, got {given:?}")
        );
    }
}

#[test]
fn a_port_that_is_not_a_number_is_refused_naming_the_range() {
    assert_eq!(server(&[("PLANB_PORT", "65535")]).expect("top").port, 65535);
    for given in ["abc", "-1", "65536", "80.5"] {
        let refused = server(&[("PLANB_PORT", given)]).expect_err(given);
        assert_eq!(refused.variable, "PLANB_PORT");
        assert_eq!(
            refused.to_string(),
            format!("PLANB_PORT: expected a port number 0-65535, got {given:?}")
        );
    }
}

#[test]
fn an_unusable_setting_is_an_invalid_configuration_naming_its_variable() {
    let problem = settings(&[("PLANB_CONCURRENCY", "100")]).expect_err("too many");
    let error = planb_app::launch::unusable_setting(&problem);
    assert_eq!(error.code, ErrorCode::InvalidConfiguration);
    assert_eq!(
        error.message,
        "PLANB_CONCURRENCY: must be a whole number from 1 to 64 (got \"100\"); fix or unset it in the server's environment"
    );
    assert_eq!(
        error.details,
        serde_json::json!({"variable": "PLANB_CONCURRENCY"})
    );
}

const CODES: [(ErrorCode, &str, u8); 14] = [
    (ErrorCode::TaskNotFound, "TASK_NOT_FOUND", 70),
    (ErrorCode::RunAlreadyActive, "RUN_ALREADY_ACTIVE", 71),
    (ErrorCode::ModelNotConfigured, "MODEL_NOT_CONFIGURED", 72),
    (ErrorCode::ModelError, "MODEL_ERROR", 73),
    (ErrorCode::InvalidConfiguration, "INVALID_CONFIGURATION", 74),
    (ErrorCode::InvalidArgument, "INVALID_ARGUMENT", 75),
    (ErrorCode::InternalError, "INTERNAL_ERROR", 76),
    (ErrorCode::RunNotFound, "RUN_NOT_FOUND", 77),
    (ErrorCode::RunNotActive, "RUN_NOT_ACTIVE", 78),
    (ErrorCode::InvalidTarget, "INVALID_TARGET", 79),
    (ErrorCode::InvalidArtifactUri, "INVALID_ARTIFACT_URI", 80),
    (ErrorCode::Conflict, "CONFLICT", 81),
    (ErrorCode::RunningReadonly, "RUNNING_READONLY", 82),
    (ErrorCode::PermissionDenied, "PERMISSION_DENIED", 83),
];

#[test]
fn every_error_code_reads_as_the_tools_name_it_and_keeps_its_exit_status() {
    for (code, name, status) in CODES {
        assert_eq!(code.as_str(), name);
        assert_eq!(code.to_string(), name);
        assert_eq!(code.exit_status(), status, "{name}");
        assert_eq!(ErrorCode::from_exit_status(status.into()), Some(code));
    }
    let error = Error::new(ErrorCode::RunNotFound, "run_id: no such run");
    assert_eq!(error.to_string(), "RUN_NOT_FOUND: run_id: no such run");
    assert_eq!(error.details, serde_json::json!({}));
    let invalid = Error::invalid("steps: missing steps");
    assert_eq!(invalid.code, ErrorCode::InvalidArgument);
    assert_eq!(Error::internal("disk full").code, ErrorCode::InternalError);
}

#[test]
fn a_store_s_refusal_keeps_its_code_and_any_other_failure_is_internal() {
    let task_refusal = StoreError::Rejected(Rejection::Task {
        code: planb_core::TaskErrorCode::RunNotActive,
        message: "task t has no active run to stop".into(),
    });
    let error = Error::from(task_refusal);
    assert_eq!(error.code, ErrorCode::RunNotActive);
    assert_eq!(error.message, "task t has no active run to stop");
    let session = SessionId::from_uuid(new_uuid());
    let other = Error::from(StoreError::Rejected(Rejection::UnknownSession { session }));
    assert_eq!(other.code, ErrorCode::Conflict);
    assert!(other.message.contains(&session.to_string()), "{other}");
    let failure = Error::from(StoreError::Interrupted("the runtime stopped".into()));
    assert_eq!(failure.code, ErrorCode::InternalError);
    assert_eq!(
        failure.message,
        "planb could not record this: a store call did not finish: the runtime stopped"
    );
}

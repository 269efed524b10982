//! What `planb-mcp` tells a person who runs it by hand: at a terminal it
//! says what it is and what to run, then serves all the same; a first word
//! that is neither a command nor a program is refused with the same words,
//! instead of being taken for the submit command and serving a session
//! nobody speaks to.

use std::io::IsTerminal;
use std::path::Path;

/// What this program is, and what a person runs instead.
pub(crate) const HINT: &str = "\
planb-mcp is an MCP server: an agent such as Claude Code starts it and speaks
JSON-RPC on its stdin and stdout (claude mcp add --scope user planb -- planb-mcp).
  try it:                   planb-mcp demo
  replay what was recorded: planb-retro
  every command:            planb-mcp --help";

/// Says [`HINT`] on stderr when stdin is a terminal (a person, not a client).
pub(crate) fn greet_at_terminal() {
    if std::io::stdin().is_terminal() {
        eprintln!("{HINT}\nServing on stdin and stdout now; Ctrl-D ends it.");
    }
}

/// Refuses a submit command whose program is neither a path to an
/// executable file nor a name found on `PATH`.
pub(crate) fn check_submit_command(command: &[String]) -> anyhow::Result<()> {
    let Some(program) = command.first() else {
        return Ok(());
    };
    if runnable(program) {
        return Ok(());
    }
    anyhow::bail!(
        "`{program}` is neither a planb-mcp command nor a program on PATH, so it cannot be \
         the submit command submit_plan runs.\n{HINT}"
    )
}

fn runnable(program: &str) -> bool {
    if program.contains('/') {
        return executable(Path::new(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::check_submit_command;

    #[test]
    fn a_program_on_path_or_by_path_is_a_submit_command_and_another_word_is_not() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_submit_command(&[]).is_ok());
        assert!(check_submit_command(&words(&["sh", "-c", "cat"])).is_ok());
        assert!(check_submit_command(&words(&["/bin/sh"])).is_ok());
        let refused = check_submit_command(&words(&["retro"])).expect_err("not a program");
        let text = refused.to_string();
        assert!(
            text.contains("`retro`") && text.contains("planb-retro"),
            "{text}"
        );
        assert!(check_submit_command(&words(&["/no/such/program"])).is_err());
    }
}

//! Confirmation of commands that change state: a `[y/N]` question on a
//! terminal, else `--yes` is required.

use std::io::{BufRead, IsTerminal, Write};

use super::CliError;

/// Asks "`question` [y/N]" on the terminal, unless `yes`.
///
/// # Errors
/// [`CliError::NeedsYes`] when stdin is not a terminal;
/// [`CliError::Declined`] for any answer but `y`/`yes`.
pub(crate) fn confirm(what: &str, question: &str, yes: bool) -> Result<(), CliError> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::NeedsYes {
            what: what.to_owned(),
        });
    }
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "{question} [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    let _ = stdin.lock().read_line(&mut answer);
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::Declined {
            what: what.to_owned(),
        }),
    }
}

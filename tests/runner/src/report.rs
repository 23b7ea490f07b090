//! What a failed test binary's log says: its `failures:` section, and
//! each panic in a line (printed last, where a truncated CI page still
//! shows them).

/// A failed binary's output printed from its `failures:` section, at most
/// this many lines (the whole log stays in target/suite/).
const PRINTED_FAILURE_LINES: usize = 300;

/// A failed binary's log from its first `failures:` section (libtest's
/// summary), or its tail.
pub fn failures_of(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let from = lines
        .iter()
        .position(|l| *l == "failures:")
        .unwrap_or(lines.len().saturating_sub(60));
    let shown = &lines[from..];
    let cut = shown.len().saturating_sub(PRINTED_FAILURE_LINES);
    shown[cut..].join("\n")
}

/// Each panic of a test's log, in a line: where, and the message's first
/// lines (at most [`PANIC_CHARS`] characters).
pub fn panics_of(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.contains(" panicked at "))
        .map(|(i, line)| {
            let message = lines[i + 1..]
                .iter()
                .take_while(|l| !l.is_empty() && !l.starts_with("note: ") && !l.starts_with("----"))
                .take(3)
                .copied();
            let text = std::iter::once(*line)
                .chain(message)
                .collect::<Vec<_>>()
                .join(" ");
            text.chars().take(PANIC_CHARS).collect()
        })
        .collect()
}

/// How much of each panic [`panics_of`] keeps.
const PANIC_CHARS: usize = 600;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_panic_is_a_line_with_its_message() {
        let log = "running 2 tests\n\
                   ---- a stdout ----\n\
                   \n\
                   thread 'a' panicked at tests/x.rs:9:5:\n\
                   assertion failed: resumed <= 20\n\
                   [Slot { delay: 21 }]\n\
                   note: run with `RUST_BACKTRACE=1`\n\
                   replica log\n";
        assert_eq!(
            panics_of(log),
            [
                "thread 'a' panicked at tests/x.rs:9:5: assertion failed: resumed <= 20 [Slot { delay: 21 }]"
            ]
        );
        assert!(panics_of("test result: ok").is_empty());
    }
}

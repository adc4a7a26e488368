//! Every shell example in README.md and docs/ runs, in order, against a fresh server:
//! the documentation cannot drift from the binary.
//!
//! How the Markdown is read:
//! - each ```sh block runs (bash, `set -euo pipefail`), the blocks of one file in one
//!   script against one server, so an `export` or a file made in one block holds in
//!   the next; `qanat` is the binary under test, and `cargo run --release [--quiet] --`
//!   reads as `qanat`;
//! - starting the server is the harness's job: `qanat server`, `cargo test`, `cargo
//!   install` and `alias` lines are left out (and listed in the report, with why),
//!   and `http://127.0.0.1:8080` is the test server;
//! - `<!-- docs-test: setup … -->` (invisible when rendered) holds shell that runs
//!   before the next block: the files an example reads, a project it works in (the
//!   repository is at `$QANAT_DOCS_REPO`, for its `examples/`);
//! - `<!-- docs-test: skip: REASON -->` leaves the next block out, with the reason;
//! - synopses with placeholders (`RUN_ID`, `[--all]`) are ```text; a block of any
//!   other fence that holds commands (`qanat …`, `curl …`, `$ …`) must say why it is
//!   not run with a skip marker, so no command in the docs goes unrun unnoticed;
//! - the run writes how many commands ran and what was skipped, and why, to
//!   `docs-test-report.txt` in the target's tmp dir (CI prints it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Qanat;

/// One runnable block: where it is, and its lines as they will run.
struct Block {
    line: usize,
    setup: Vec<String>,
    body: Vec<String>,
}

/// What the reader found in one Markdown file.
#[derive(Default)]
struct Read {
    /// The ```sh blocks, to run.
    run: Vec<Block>,
    /// Blocks left out, with the line they start at and the reason given.
    skipped: Vec<(usize, String)>,
    /// Blocks of another fence (```text, ```) holding commands, with no skip marker:
    /// commands that nothing would run.
    unmarked: Vec<(usize, String)>,
}

/// Whether a line of a fenced block is a shell command (`$ ` prompts allowed).
fn is_command(line: &str) -> bool {
    let t = line.trim_start();
    let t = t.strip_prefix("$ ").unwrap_or(t);
    [
        "qanat ", "curl ", "cargo ", "python ", "python3 ", "pip ", "export ", "mlflow ",
        "kubectl ", "sbatch ", "docker ", "bash ", "feast ",
    ]
    .iter()
    .any(|c| t.starts_with(c))
}

/// The blocks of a Markdown file: the ```sh ones to run, the skipped ones with their
/// reasons, and commands in other fences that are neither run nor skipped.
fn blocks(text: &str) -> Read {
    let mut read = Read::default();
    let mut setup: Vec<String> = Vec::new();
    let mut skip: Option<String> = None;
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("<!-- docs-test: skip:") {
            skip = Some(rest.trim_end_matches("-->").trim().to_string());
        } else if t == "<!-- docs-test: setup" {
            for (_, l) in lines.by_ref() {
                if l.trim() == "-->" {
                    break;
                }
                setup.push(l.to_string());
            }
        } else if let Some(lang) = t.strip_prefix("```") {
            let mut body = Vec::new();
            for (_, l) in lines.by_ref() {
                if l.trim_start().starts_with("```") {
                    break;
                }
                body.push(l.to_string());
            }
            let runnable = lang == "sh";
            match skip.take() {
                Some(reason) => {
                    assert!(!reason.is_empty(), "line {}: say why it is skipped", i + 1);
                    read.skipped.push((i + 1, reason));
                    setup.clear();
                }
                None if runnable => read.run.push(Block {
                    line: i + 1,
                    setup: std::mem::take(&mut setup),
                    body,
                }),
                None => {
                    if let Some(c) = body.iter().find(|l| is_command(l)) {
                        read.unmarked.push((i + 1, c.trim().to_string()));
                    }
                }
            }
        }
    }
    read
}

/// How many commands `lines` hold: lines that are not blank, comments, the
/// continuation of a line ending in `\`, or the body of a here-document.
fn commands(lines: &[String]) -> usize {
    let mut n = 0;
    let mut continued = false;
    let mut heredoc: Option<String> = None;
    for l in lines {
        let t = l.trim();
        if let Some(end) = &heredoc {
            if t == end {
                heredoc = None;
            }
            continue;
        }
        if !continued && !t.is_empty() && !t.starts_with('#') {
            n += 1;
        }
        continued = t.ends_with('\\');
        if let Some(at) = t.find("<<") {
            let word = t[at + 2..]
                .trim_start_matches('-')
                .trim()
                .trim_matches(|c| c == '\'' || c == '"');
            let word: String = word
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !word.is_empty() {
                heredoc = Some(word);
            }
        }
    }
    n
}

/// A documented line as it runs here, or (as `Err`) why the harness does it itself.
fn as_run(line: &str, url: &str) -> Result<String, &'static str> {
    let line = line
        .replace("cargo run --release --quiet --", "qanat")
        .replace("cargo run --release --", "qanat")
        .replace("http://127.0.0.1:8080", url);
    let cmd = line.trim_start();
    for (start, why) in [
        (
            "qanat server",
            "the harness starts a fresh server for each file",
        ),
        ("cargo test", "the test suite itself, which CI runs"),
        (
            "cargo install",
            "the harness runs the binary this test was built with",
        ),
        ("alias ", "the harness puts that binary on PATH as qanat"),
    ] {
        if cmd.starts_with(start) {
            return Err(why);
        }
    }
    Ok(line)
}

/// Runs one file's blocks as one script against a fresh server; panics with the
/// script's output when a command fails. Returns the blocks and commands run, and the
/// lines left to the harness (`line: command (why)`).
fn run_file(path: &Path) -> (usize, usize, Vec<String>) {
    let text = std::fs::read_to_string(path).expect("read doc");
    let blocks = blocks(&text).run;
    if blocks.is_empty() {
        return (0, 0, Vec::new());
    }
    let mut harness = Vec::new();
    let q = Qanat::start();
    let bin_dir = q.dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).expect("mkdir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_qanat"), bin_dir.join("qanat"))
        .expect("symlink");
    let work = q.dir.path().join("work");
    std::fs::create_dir_all(&work).expect("mkdir");
    let mut script = String::from("set -euo pipefail\n");
    for b in &blocks {
        script.push_str(&format!("echo '>>> {}:{}' >&2\n", path.display(), b.line));
        for l in b.setup.iter().chain(&b.body) {
            match as_run(l, &q.url) {
                Ok(l) => {
                    script.push_str(&l);
                    script.push('\n');
                }
                Err(why) => harness.push(format!("{}: `{}` ({why})", b.line, l.trim())),
            }
        }
    }
    let path_var = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env_clear()
        .env("PATH", path_var)
        .env("HOME", q.dir.path())
        .env("QANAT_HOME", q.dir.path().join("home"))
        .env("QANAT_CREDENTIALS", q.dir.path().join("credentials.json"))
        .env("QANAT_SERVER_URL", &q.url)
        .env("QANAT_TOKEN", &q.admin_token)
        .env("QANAT_LOG_LEVEL", "warn")
        // Where a setup block finds the repository's example files.
        .env(
            "QANAT_DOCS_REPO",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        )
        .current_dir(&work)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{} failed at the block after the last '>>>' line:\n--- script\n{script}\n--- stdout\n{}\n--- stderr\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let commands = blocks
        .iter()
        .map(|b| commands(&b.setup) + commands(&b.body))
        .sum();
    (blocks.len(), commands, harness)
}

fn docs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    files.extend(more);
    files
}

#[test]
fn every_shell_example_in_the_docs_runs() {
    let (mut ran, mut commands) = (0, 0);
    let mut report = String::new();
    let mut skipped = Vec::new();
    let mut harness = Vec::new();
    for path in docs() {
        let (b, c, h) = run_file(&path);
        ran += b;
        commands += c;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        if b > 0 {
            report.push_str(&format!("  {name}: {b} blocks, {c} commands\n"));
        }
        harness.extend(h.into_iter().map(|l| format!("  {name}:{l}")));
        let text = std::fs::read_to_string(&path).expect("read");
        skipped.extend(
            blocks(&text)
                .skipped
                .into_iter()
                .map(|(line, why)| format!("  {name}:{line}: {why}")),
        );
    }
    let report = format!(
        "docs test: {commands} commands in {ran} blocks ran\n{report}{} blocks skipped, each with its reason:\n{}\n{} lines done by the harness instead, at the block's line:\n{}\n",
        skipped.len(),
        skipped.join("\n"),
        harness.len(),
        harness.join("\n")
    );
    eprint!("{report}");
    // CI prints it (the test's own output is captured when it passes).
    let _ = std::fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-test-report.txt"),
        &report,
    );
    assert!(ran >= 6, "only {ran} blocks ran: are the docs still read?");
}

#[test]
fn every_command_in_the_docs_runs_or_says_why_not() {
    for path in docs() {
        let text = std::fs::read_to_string(&path).expect("read");
        let read = blocks(&text);
        for (line, reason) in &read.skipped {
            assert!(
                reason.len() > 10,
                "{}:{line}: skip reason '{reason}'",
                path.display()
            );
        }
        assert!(
            read.unmarked.is_empty(),
            "{}: commands that nothing runs (make the block ```sh, or put <!-- docs-test: skip: WHY, and what tests it --> before it): {:?}",
            path.display(),
            read.unmarked
        );
        // Shell in a fence of another name would silently not run.
        for (i, l) in text.lines().enumerate() {
            let fence = l.trim();
            assert!(
                !matches!(fence, "```bash" | "```shell" | "```console"),
                "{}:{}: use ```sh for commands (run by this test) or ```text for synopses",
                path.display(),
                i + 1
            );
        }
    }
}

#[test]
fn the_reader_finds_setup_skip_and_blocks() {
    let md = "intro\n<!-- docs-test: setup\nmkdir d\n-->\n```sh\nqanat whoami\n```\n\n<!-- docs-test: skip: needs a second server -->\n```sh\nqanat server\n```\n```text\nqanat runs show RUN_ID\n```\n```\n$ curl -s http://x\n```\n```text\n#SBATCH --nodes=1\n```\n";
    let read = blocks(md);
    assert_eq!(read.run.len(), 1);
    assert_eq!(read.run[0].setup, ["mkdir d"]);
    assert_eq!(read.run[0].body, ["qanat whoami"]);
    assert_eq!(read.skipped, [(10, "needs a second server".to_string())]);
    assert_eq!(
        read.unmarked,
        [
            (13, "qanat runs show RUN_ID".to_string()),
            (16, "$ curl -s http://x".to_string())
        ]
    );
    assert_eq!(
        as_run("cargo run --release -- server", "u"),
        Err("the harness starts a fresh server for each file")
    );
    assert_eq!(
        as_run("curl http://127.0.0.1:8080/x", "http://h:1").as_deref(),
        Ok("curl http://h:1/x")
    );
    let lines = |s: &str| s.lines().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        commands(&lines(
            "# a comment\nqanat a \\\n  --b\n\ncat > f <<'EOF'\nkind: x\nEOF\nqanat c\n"
        )),
        3
    );
}

//! Tables of named cases against the real server: every case runs, in order, and the
//! failures are reported together at the end under their cases' names, so that one
//! failure hides no other.
//!
//! ```ignore
//! run_cases(&q, vec![
//!     Case {
//!         name: "an unknown project",
//!         call: Call::get("/api/v1/projects/nope"),
//!         expect: Expect::Status(404),
//!         code: "RESOURCE_DOES_NOT_EXIST",
//!         ..Case::default()
//!     },
//! ]);
//! ```

use std::collections::BTreeSet;

use serde_json::Value;

use super::Qanat;

/// What a case sends.
pub enum Call {
    /// An HTTP request; `token` is the admin's unless set ("" sends none).
    Http {
        method: &'static str,
        path: String,
        token: Option<String>,
        headers: Vec<(&'static str, String)>,
        body: Body,
    },
    /// `qanat <args>` against the server, as the admin.
    Cli(Vec<String>),
}

pub enum Body {
    None,
    Json(Value),
    /// Sent as is, with no content type unless a header sets one.
    Bytes(Vec<u8>),
}

impl Call {
    pub fn http(method: &'static str, path: impl Into<String>) -> Call {
        Call::Http {
            method,
            path: path.into(),
            token: None,
            headers: Vec::new(),
            body: Body::None,
        }
    }

    pub fn get(path: impl Into<String>) -> Call {
        Call::http("GET", path)
    }

    pub fn post(path: impl Into<String>) -> Call {
        Call::http("POST", path)
    }

    pub fn put(path: impl Into<String>) -> Call {
        Call::http("PUT", path)
    }

    pub fn patch(path: impl Into<String>) -> Call {
        Call::http("PATCH", path)
    }

    pub fn delete(path: impl Into<String>) -> Call {
        Call::http("DELETE", path)
    }

    pub fn cli(args: &[&str]) -> Call {
        Call::Cli(args.iter().map(|a| a.to_string()).collect())
    }

    pub fn json(self, v: Value) -> Call {
        self.with(|_, _, body| *body = Body::Json(v))
    }

    pub fn bytes(self, b: impl Into<Vec<u8>>) -> Call {
        let b = b.into();
        self.with(|_, _, body| *body = Body::Bytes(b))
    }

    pub fn header(self, name: &'static str, value: impl Into<String>) -> Call {
        let value = value.into();
        self.with(|_, headers, _| headers.push((name, value)))
    }

    /// Sends `token` instead of the admin's ("" for none).
    pub fn token(self, token: impl Into<String>) -> Call {
        let token = token.into();
        self.with(|t, _, _| *t = Some(token))
    }

    fn with(
        mut self,
        f: impl FnOnce(&mut Option<String>, &mut Vec<(&'static str, String)>, &mut Body),
    ) -> Call {
        match &mut self {
            Call::Http {
                token,
                headers,
                body,
                ..
            } => f(token, headers, body),
            Call::Cli(_) => panic!("HTTP settings on a CLI case"),
        }
        self
    }
}

/// The outcome a case expects.
pub enum Expect {
    /// This HTTP status.
    Status(u16),
    /// A CLI command that exits with an error.
    Fails,
}

/// A check on the JSON response, at a JSON pointer ("" for the whole body).
pub enum Check {
    /// An array of this many items.
    Len(&'static str, usize),
    Eq(&'static str, Value),
}

pub struct Case {
    pub name: &'static str,
    pub call: Call,
    pub expect: Expect,
    /// The error body's `error_code` (with a non-empty `message`); "" checks none.
    pub code: &'static str,
    /// Text the error message must contain: the JSON body's `message`, else the body
    /// itself, or a CLI command's stderr. "" checks none.
    pub message: &'static str,
    pub checks: Vec<Check>,
}

impl Default for Case {
    fn default() -> Case {
        Case {
            name: "",
            call: Call::get("/"),
            expect: Expect::Status(200),
            code: "",
            message: "",
            checks: Vec::new(),
        }
    }
}

impl Case {
    /// A call answered with `status`.
    pub fn status(name: &'static str, call: Call, status: u16) -> Case {
        Case {
            name,
            call,
            expect: Expect::Status(status),
            ..Case::default()
        }
    }

    /// A call refused with `status` and a message that contains `message`.
    pub fn refused(name: &'static str, call: Call, status: u16, message: &'static str) -> Case {
        Case {
            message,
            ..Case::status(name, call, status)
        }
    }

    /// A call refused with `status` and the error code `code`.
    pub fn coded(name: &'static str, call: Call, status: u16, code: &'static str) -> Case {
        Case {
            code,
            ..Case::status(name, call, status)
        }
    }

    /// The same case, with an error message that must contain `message`.
    pub fn saying(self, message: &'static str) -> Case {
        Case { message, ..self }
    }

    /// The same case, with `checks` on its JSON answer.
    pub fn checking(self, checks: Vec<Check>) -> Case {
        Case { checks, ..self }
    }

    /// A CLI command that fails, saying `message`.
    pub fn fails(name: &'static str, args: &[&str], message: &'static str) -> Case {
        Case {
            name,
            call: Call::cli(args),
            expect: Expect::Fails,
            message,
            ..Case::default()
        }
    }
}

/// Runs every case in order and fails, naming each failed case and why, if any did.
#[track_caller]
pub fn run_cases(q: &Qanat, cases: Vec<Case>) {
    let mut names = BTreeSet::new();
    for c in &cases {
        assert!(names.insert(c.name), "two cases are named '{}'", c.name);
    }
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let problems = run_case(q, c);
            (!problems.is_empty()).then(|| format!("{}: {}", c.name, problems.join("; ")))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n  {}",
        failures.len(),
        cases.len(),
        failures.join("\n  ")
    );
}

/// What went wrong with one case (nothing when it passed).
fn run_case(q: &Qanat, c: &Case) -> Vec<String> {
    let mut problems = Vec::new();
    let (text, json) = match &c.call {
        Call::Http {
            method,
            path,
            token,
            headers,
            body,
        } => {
            let token = token.as_deref().unwrap_or(&q.admin_token);
            let mut rb = q.http().raw(token, method, path);
            for (k, v) in headers {
                rb = rb.header(*k, v.as_str());
            }
            rb = match body {
                Body::None => rb,
                Body::Json(v) => rb.json(v),
                Body::Bytes(b) => rb.body(b.clone()),
            };
            let resp = match rb.send() {
                Ok(r) => r,
                Err(e) => return vec![format!("{method} {path} failed: {e}")],
            };
            let status = resp.status().as_u16();
            let text = resp.text().unwrap_or_default();
            match c.expect {
                Expect::Status(want) if want != status => problems.push(format!(
                    "status {status}, expected {want} (body: {})",
                    clip(&text)
                )),
                Expect::Status(_) => {}
                Expect::Fails => problems.push("an HTTP case expects a status".into()),
            }
            let json = serde_json::from_str::<Value>(&text).ok();
            (text, json)
        }
        Call::Cli(args) => {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (ok, stdout, stderr) = q.cli(&args);
            match c.expect {
                Expect::Fails if ok => problems.push(format!(
                    "succeeded, expected a failure (stdout: {})",
                    clip(&stdout)
                )),
                Expect::Fails => {}
                Expect::Status(_) => problems.push("a CLI case expects Fails".into()),
            }
            (stderr, None)
        }
    };
    if !c.code.is_empty() {
        match &json {
            None => problems.push(format!("the body is not JSON: {}", clip(&text))),
            Some(v) => {
                if v["error_code"] != c.code {
                    problems.push(format!(
                        "error_code {}, expected {}",
                        v["error_code"], c.code
                    ));
                }
                if v["message"].as_str().unwrap_or("").is_empty() {
                    problems.push(format!("no message in {v}"));
                }
            }
        }
    }
    if !c.message.is_empty() {
        let message = json
            .as_ref()
            .and_then(|v| v["message"].as_str())
            .unwrap_or(&text);
        if !message.contains(c.message) {
            problems.push(format!(
                "the message does not say '{}': {}",
                c.message,
                clip(message)
            ));
        }
    }
    for check in &c.checks {
        let at = |pointer: &str| json.as_ref().and_then(|v| v.pointer(pointer)).cloned();
        match check {
            Check::Len(pointer, n) => match at(pointer).as_ref().and_then(Value::as_array) {
                Some(items) if items.len() == *n => {}
                Some(items) => problems.push(format!(
                    "'{pointer}' has {} items, expected {n}",
                    items.len()
                )),
                None => problems.push(format!("no array at '{pointer}' in {}", clip(&text))),
            },
            Check::Eq(pointer, want) => {
                let got = at(pointer);
                if got.as_ref() != Some(want) {
                    problems.push(format!(
                        "'{pointer}' is {}, expected {want}",
                        got.map_or("missing".into(), |v| v.to_string())
                    ));
                }
            }
        }
    }
    problems
}

/// The start of a long body, for a failure message.
fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(300).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

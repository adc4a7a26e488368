//! Job kinds. A kind turns the kind-specific fields of a spec into the processes a job
//! runs; everything else (queueing, resources, retries, logs, tokens, runs) is the
//! scheduler's and the same for every kind. Adding a kind is one module implementing
//! [`JobKind`] and one line in [`Kinds::standard`] (or [`Kinds::with`] from another
//! crate: the trainer and sweeps plug in this way).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;

use crate::{Error, Result};

/// A kind's fields as the API publishes them: the schema of the type they are read into
/// (named, e.g. `TrainFields`) and every schema it refers to.
#[derive(Clone)]
pub struct FieldsSchema {
    pub name: String,
    pub schemas: Vec<(String, RefOr<Schema>)>,
}

impl std::fmt::Debug for FieldsSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.schemas.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("FieldsSchema")
            .field("name", &self.name)
            .field("schemas", &names)
            .finish()
    }
}

impl FieldsSchema {
    /// The schema of `F`, the type a kind reads its fields into.
    pub fn of<F: utoipa::ToSchema>() -> FieldsSchema {
        let name = F::name().into_owned();
        let mut schemas = vec![(name.clone(), F::schema())];
        F::schemas(&mut schemas);
        FieldsSchema { name, schemas }
    }
}

/// What one rank of a job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPlan {
    pub program: String,
    pub args: Vec<String>,
    /// Variables the kind adds (the scheduler adds its own after these).
    pub env: Vec<(String, String)>,
    /// Where it starts; the job's own directory when None.
    pub working_dir: Option<PathBuf>,
}

/// One kind of job.
pub trait JobKind: Send + Sync + std::fmt::Debug + 'static {
    /// The word in a spec's `kind`.
    fn name(&self) -> &'static str;

    /// Checks the kind's fields at submit; `path` is the PATH the job will have. The
    /// message of an error is shown to the submitter.
    fn check(&self, params: &Map<String, Value>, path: &str) -> Result<()>;

    /// What rank `rank` of `ranks` runs.
    fn plan(&self, params: &Map<String, Value>, rank: u32, ranks: u32) -> Result<ProcessPlan>;

    /// The type the kind reads its fields into, as a schema (published in the API's
    /// OpenAPI document beside `JobSpec`).
    fn fields(&self) -> FieldsSchema;

    /// Checks the kind's fields against its inputs at submit: each pinned input
    /// (`dataset:name@version`) with the tabular profiles stored with that version
    /// (columns, types, nulls, distinct counts). None by default.
    fn check_inputs(
        &self,
        _params: &Map<String, Value>,
        _inputs: &[(String, Vec<qanat_data::tabular::FileProfile>)],
    ) -> Result<()> {
        Ok(())
    }
}

/// A kind's check of its fields (and, for [`WorkerKind::with_input_check`], of its
/// inputs' profiles): the error says what to fix.
pub type FieldCheck = fn(&Map<String, Value>) -> std::result::Result<(), String>;
pub type InputCheck = fn(
    &Map<String, Value>,
    &[(String, Vec<qanat_data::tabular::FileProfile>)],
) -> std::result::Result<(), String>;

/// A kind whose process is a subcommand of a program, `program <name>-worker` (the
/// `qanat` binary's trainer, sweeps and optimizer), started with the job's fields as
/// JSON in one variable. Its checks' errors are refused at submit as "a <name> job: …".
#[derive(Debug, Clone)]
pub struct WorkerKind {
    name: &'static str,
    program: PathBuf,
    var: &'static str,
    check: FieldCheck,
    check_inputs: Option<InputCheck>,
    fields: fn() -> FieldsSchema,
}

impl WorkerKind {
    /// Kind `name`, run as `program <name>-worker` with the fields in `var`: they are
    /// an `F` (the schema published for the kind), read and checked by `check` at
    /// submit.
    pub fn new<F: utoipa::ToSchema>(
        name: &'static str,
        program: PathBuf,
        var: &'static str,
        check: FieldCheck,
    ) -> Self {
        WorkerKind {
            name,
            program,
            var,
            check,
            check_inputs: None,
            fields: FieldsSchema::of::<F>,
        }
    }

    /// The same kind, checking its fields against its inputs' profiles at submit too.
    pub fn with_input_check(self, check: InputCheck) -> Self {
        WorkerKind {
            check_inputs: Some(check),
            ..self
        }
    }

    fn refused(&self, e: String) -> Error {
        let article = if self.name.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        Error::Invalid(format!("{article} {} job: {e}", self.name))
    }
}

impl JobKind for WorkerKind {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&self, params: &Map<String, Value>, _path: &str) -> Result<()> {
        (self.check)(params).map_err(|e| self.refused(e))
    }

    fn check_inputs(
        &self,
        params: &Map<String, Value>,
        inputs: &[(String, Vec<qanat_data::tabular::FileProfile>)],
    ) -> Result<()> {
        match self.check_inputs {
            Some(check) => check(params, inputs).map_err(|e| self.refused(e)),
            None => Ok(()),
        }
    }

    fn plan(&self, params: &Map<String, Value>, _rank: u32, _ranks: u32) -> Result<ProcessPlan> {
        Ok(ProcessPlan {
            program: self.program.display().to_string(),
            args: vec![format!("{}-worker", self.name)],
            env: vec![(self.var.into(), Value::Object(params.clone()).to_string())],
            working_dir: None,
        })
    }

    fn fields(&self) -> FieldsSchema {
        (self.fields)()
    }
}

/// The kinds a server accepts, by name.
#[derive(Debug, Clone)]
pub struct Kinds(BTreeMap<&'static str, Arc<dyn JobKind>>);

impl Kinds {
    /// The kinds built into this crate: `command`.
    pub fn standard() -> Self {
        Kinds(BTreeMap::new()).with(Arc::new(Command))
    }

    /// These kinds and `kind`.
    pub fn with(mut self, kind: Arc<dyn JobKind>) -> Self {
        self.0.insert(kind.name(), kind);
        self
    }

    /// Every kind, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn JobKind>> {
        self.0.values()
    }

    pub fn get(&self, name: &str) -> Result<&Arc<dyn JobKind>> {
        self.0.get(name).ok_or_else(|| {
            Error::invalid(format!(
                "kind = '{name}' is not a job kind here; use one of: {}",
                self.0.keys().copied().collect::<Vec<_>>().join(", ")
            ))
        })
    }
}

/// `kind: command`: any executable with arguments — a Python script, torchrun, a shell
/// script. `command` is a list (run as is) or a string (run by `/bin/sh -c`).
#[derive(Debug)]
pub struct Command;

/// A `command` job's fields.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandFields {
    /// The program and its arguments (run as is), or a shell line (run by `/bin/sh
    /// -c`).
    command: CommandLine,
    /// Where it starts: a directory on the server, or one inside the job's directory
    /// (relative); the job's directory by default.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    working_dir: Option<PathBuf>,
    /// The container image (the Kubernetes executor only).
    #[serde(default)]
    #[allow(dead_code)]
    image: Option<String>,
}

/// A command line: `["python", "train.py"]`, or `"python train.py | tee log"`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
enum CommandLine {
    Argv(Vec<String>),
    Shell(String),
}

fn params(params: &Map<String, Value>) -> Result<CommandFields> {
    if !params.contains_key("command") {
        return Err(Error::invalid(
            "a command job needs `command`: a list like [\"python\", \"train.py\"] or a shell line",
        ));
    }
    serde_json::from_value(Value::Object(params.clone())).map_err(|e| {
        Error::invalid(format!(
            "{e} (a command job takes `command`, `working_dir` and, on Kubernetes, `image` beside the common fields)"
        ))
    })
}

impl CommandFields {
    fn argv(&self) -> Result<(String, Vec<String>)> {
        match &self.command {
            CommandLine::Argv(v) => match v.split_first() {
                Some((p, rest)) if !p.is_empty() => Ok((p.clone(), rest.to_vec())),
                _ => Err(Error::invalid(
                    "command is empty: name the program to run, e.g. [\"python\", \"train.py\"]",
                )),
            },
            CommandLine::Shell(s) if !s.trim().is_empty() => {
                Ok(("/bin/sh".into(), vec!["-c".into(), s.clone()]))
            }
            CommandLine::Shell(_) => Err(Error::invalid("command is empty")),
        }
    }
}

/// Whether `path` is a file someone may execute.
fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds `program` the way `execvp` will: as a path when it holds a '/', else on PATH.
pub(crate) fn resolve_program(program: &str, path: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = Path::new(program);
        let p = match cwd {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        };
        return executable(&p).then_some(p);
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| executable(p))
}

impl JobKind for Command {
    fn name(&self) -> &'static str {
        "command"
    }

    fn fields(&self) -> FieldsSchema {
        FieldsSchema::of::<CommandFields>()
    }

    fn check(&self, p: &Map<String, Value>, path: &str) -> Result<()> {
        let p = params(p)?;
        if let Some(dir) = &p.working_dir {
            // A relative one is made inside the job's directory when it starts.
            if dir.is_absolute() && !dir.is_dir() {
                return Err(Error::invalid(format!(
                    "working_dir '{}' is not a directory on the server",
                    dir.display()
                )));
            }
        }
        let (program, _) = p.argv()?;
        let cwd = p.working_dir.as_deref().filter(|d| d.is_absolute());
        // A relative program in a relative working directory exists only once the
        // job's directory does.
        let later = program.contains('/')
            && !Path::new(&program).is_absolute()
            && p.working_dir.as_deref().is_some_and(|d| d.is_relative());
        if !later && resolve_program(&program, path, cwd).is_none() {
            return Err(Error::invalid(format!(
                "command '{program}' was not found{}; give a path to an executable or a program on the job's PATH ({path})",
                if program.contains('/') { "" } else { " on PATH" }
            )));
        }
        Ok(())
    }

    fn plan(&self, p: &Map<String, Value>, _rank: u32, _ranks: u32) -> Result<ProcessPlan> {
        let p = params(p)?;
        let (program, args) = p.argv()?;
        Ok(ProcessPlan {
            program,
            args,
            env: Vec::new(),
            working_dir: p.working_dir,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().expect("test input").clone()
    }

    #[test]
    fn a_command_is_a_list_or_a_shell_line() {
        let plan = Command
            .plan(&map(json!({"command": ["echo", "hi"]})), 0, 1)
            .expect("test input");
        assert_eq!(
            (plan.program.as_str(), plan.args),
            ("echo", vec!["hi".to_string()])
        );
        let plan = Command
            .plan(&map(json!({"command": "echo hi && true"})), 0, 1)
            .expect("test input");
        assert_eq!(plan.program, "/bin/sh");
        assert_eq!(plan.args, ["-c", "echo hi && true"]);
    }

    #[test]
    fn a_missing_program_is_refused_at_submit() {
        let e = Command
            .check(
                &map(json!({"command": ["no-such-program-q"]})),
                "/usr/bin:/bin",
            )
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("'no-such-program-q' was not found on PATH"),
            "{e}"
        );
        assert!(Command
            .check(
                &map(json!({"command": ["sh", "-c", "true"]})),
                "/usr/bin:/bin"
            )
            .is_ok());
        let e = Command
            .check(&map(json!({"commnd": ["true"]})), "/bin")
            .expect_err("refused")
            .to_string();
        assert!(e.contains("needs `command`"), "{e}");
        let e = Command
            .check(&map(json!({"command": ["true"], "extra": 1})), "/bin")
            .expect_err("refused")
            .to_string();
        assert!(e.contains("unknown field `extra`"), "{e}");
    }
}

//! The Python environments models run in: one virtual environment per distinct set of
//! requirements (a model's `requirements.txt`), built once with pip from the
//! configured package index and kept, keyed by a hash of what went into it.
//!
//! A model's requirements are untrusted: only plain requirement lines are accepted (a
//! name, extras, version specifiers, an environment marker), never pip options, URLs
//! or paths; and only wheels are installed (`--only-binary=:all:`), so installing runs
//! no code of the packages' own. `mlflow` is installed as `mlflow-skinny` of the same
//! version (what loading a model needs, without the tracking server), and `pyarrow`
//! and `pandas` are added for the worker's own protocol.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::Settings;

/// Bumped when the worker or the way environments are built changes.
const BUILD_VERSION: &str = "1";

/// The file an environment (or a model's directory) holds once it is complete.
pub(super) const READY: &str = ".qanat-ready";

/// The pip requirements of a model that has a `conda.yaml` but no `requirements.txt`
/// (MLflow writes both; models logged by hand or by old versions may carry only the
/// former), as `requirements.txt` lines for [`requirements`] to check. Only the `pip`
/// section is installed: `python` and `pip` themselves are the server's, and any other
/// conda package is refused by name rather than left to fail at import.
///
/// The file is untrusted and parsed in the server, so it is read without building a
/// tree of it: only `dependencies` is walked (everything else skipped, which follows no
/// YAML alias), and at most [`MAX_CONDA_ITEMS`] entries are taken in all — an alias
/// replays what it names, so a small file could otherwise stand for billions of them.
pub fn conda_pip_requirements(text: &str) -> Result<String, String> {
    /// Larger than any environment file MLflow writes.
    const MAX_BYTES: usize = 64 * 1024;
    if text.len() > MAX_BYTES {
        return Err(format!(
            "its conda.yaml has {} bytes, over the {MAX_BYTES} read",
            text.len()
        ));
    }
    let read = conda::Read {
        budget: std::cell::Cell::new(MAX_CONDA_ITEMS),
        lines: std::cell::RefCell::new(Vec::new()),
    };
    serde::de::DeserializeSeed::deserialize(
        conda::File(&read),
        serde_yaml_ng::Deserializer::from_str(text),
    )
    .map_err(|e| format!("its conda.yaml {e}"))?;
    Ok(read.lines.into_inner().join("\n"))
}

/// The most dependency entries and pip lines read from one `conda.yaml`.
pub const MAX_CONDA_ITEMS: usize = 1000;

/// The reading of a `conda.yaml`'s `dependencies` (see [`conda_pip_requirements`]).
mod conda {
    use std::cell::{Cell, RefCell};
    use std::fmt;

    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

    pub(super) struct Read {
        pub(super) budget: Cell<usize>,
        pub(super) lines: RefCell<Vec<String>>,
    }

    impl Read {
        fn take<E: de::Error>(&self) -> Result<(), E> {
            let left = self.budget.get();
            if left == 0 {
                return Err(E::custom(format!(
                    "has more than {} dependencies and pip lines (YAML aliases count each time they are used)",
                    super::MAX_CONDA_ITEMS
                )));
            }
            self.budget.set(left - 1);
            Ok(())
        }
    }

    /// The document: a mapping whose `dependencies` is read, the rest skipped.
    pub(super) struct File<'a>(pub(super) &'a Read);
    /// `dependencies`: a list of names and `pip:` mappings.
    struct Deps<'a>(&'a Read);
    /// One entry of `dependencies`.
    struct Dep<'a>(&'a Read);
    /// A `pip:` list of requirement lines.
    struct Pip<'a>(&'a Read);

    impl<'de> DeserializeSeed<'de> for File<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for File<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a mapping (name, channels, dependencies)")
        }
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_none<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                if key == "dependencies" {
                    map.next_value_seed(Deps(self.0))?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(())
        }
    }

    impl<'de> DeserializeSeed<'de> for Deps<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Deps<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("'dependencies' as a list")
        }
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_none<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            loop {
                self.0.take()?;
                if seq.next_element_seed(Dep(self.0))?.is_none() {
                    return Ok(());
                }
            }
        }
    }

    impl<'de> DeserializeSeed<'de> for Dep<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Dep<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a dependency: a package name or a 'pip' list")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
            let name = s
                .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
                .next()
                .unwrap_or_default();
            if name == "python" || name == "pip" {
                return Ok(());
            }
            Err(E::custom(format!(
                "lists the conda package '{}', which the Python runtime does not install \
                 (only the pip section is): list it in requirements.txt",
                s.chars().take(80).collect::<String>()
            )))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                if key != "pip" {
                    return Err(de::Error::custom(format!(
                        "has a dependency entry '{}' other than 'pip'",
                        key.chars().take(40).collect::<String>()
                    )));
                }
                map.next_value_seed(Pip(self.0))?;
            }
            Ok(())
        }
    }

    impl<'de> DeserializeSeed<'de> for Pip<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Pip<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a 'pip' list of requirement lines")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            loop {
                self.0.take()?;
                match seq.next_element::<String>()? {
                    None => return Ok(()),
                    Some(l) if l.contains(['\n', '\r']) => {
                        return Err(de::Error::custom(
                            "has a pip requirement of more than one line",
                        ))
                    }
                    Some(l) => self.0.lines.borrow_mut().push(l),
                }
            }
        }
    }
}

/// The requirement lines of a model's `requirements.txt`, checked, as pip gets them.
pub fn requirements(text: &str) -> Result<Vec<String>, String> {
    requirements_of(text, "its requirements.txt")
}

/// [`requirements`] of lines read from `file` (named in what a refusal says).
pub fn requirements_of(text: &str, file: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split(" #").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let refuse = |why: &str| {
            Err(format!(
                "line {} of {file} ('{}') {why}; only plain requirements \
                 (name, extras, versions, markers) are installed",
                i + 1,
                line.chars().take(80).collect::<String>()
            ))
        };
        if line.starts_with('-') {
            return refuse("is a pip option");
        }
        if line.contains("://") || line.contains(" @") || line.contains('@') {
            return refuse("names a URL or a direct reference");
        }
        let (spec, marker) = match line.split_once(';') {
            Some((s, m)) => (s.trim(), Some(m.trim())),
            None => (line, None),
        };
        let name_end = spec
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            .unwrap_or(spec.len());
        let name = &spec[..name_end];
        let rest = &spec[name_end..];
        if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return refuse("does not start with a package name");
        }
        let ok_rest = rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " ,.*+!=<>~[]_-".contains(c));
        let ok_marker = marker.is_none_or(|m| {
            m.chars()
                .all(|c| c.is_ascii_alphanumeric() || " ._-'\"<>=!()~,".contains(c))
        });
        if !ok_rest || !ok_marker {
            return refuse("has characters a requirement does not");
        }
        let lower = name.to_ascii_lowercase().replace('_', "-");
        let name = if lower == "mlflow" {
            "mlflow-skinny"
        } else {
            name
        };
        let mut req = format!("{name}{}", rest.trim_end());
        if let Some(m) = marker {
            req.push_str(" ; ");
            req.push_str(m);
        }
        out.push(req);
    }
    let has = |out: &[String], pkg: &str| {
        out.iter().any(|r| {
            let n: String = r
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .collect();
            n.to_ascii_lowercase().replace('_', "-") == pkg
        })
    };
    for extra in ["mlflow-skinny", "pandas", "pyarrow"] {
        if !has(&out, extra) {
            out.push(extra.to_string());
        }
    }
    Ok(out)
}

/// An environment, built.
#[derive(Debug, Clone)]
pub struct Env {
    /// The environment's interpreter.
    pub python: PathBuf,
    /// What a worker must read besides the system: the environment and the Python
    /// installation it was made from.
    pub read_only: Vec<PathBuf>,
    pub hash: String,
}

/// Builds (once, whoever asks at the same time) and finds environments.
#[derive(Debug, Default)]
pub struct Envs {
    building: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Envs {
    /// The environment for `reqs`, built if it is not there yet.
    pub async fn get(&self, settings: &Settings, reqs: &[String]) -> Result<Env, String> {
        let (base, exe) = base_prefix(&settings.interpreter).await?;
        let mut h = Sha256::new();
        h.update(BUILD_VERSION);
        h.update([0]);
        h.update(exe.as_os_str().as_encoded_bytes());
        h.update([0]);
        h.update(base.as_os_str().as_encoded_bytes());
        h.update([0]);
        h.update(settings.index_url.as_deref().unwrap_or_default());
        for r in reqs {
            h.update([0]);
            h.update(r.as_bytes());
        }
        let hash: String = h.finalize()[..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = settings.envs_dir.join(&hash);
        let env = Env {
            python: dir.join("bin").join("python"),
            read_only: vec![dir.clone(), base],
            hash: hash.clone(),
        };
        let lock = {
            let mut b = self.building.lock().unwrap_or_else(|p| p.into_inner());
            b.entry(hash.clone()).or_default().clone()
        };
        // The build is a task of its own: a caller that gives up (a request's timeout)
        // does not stop it, and the next caller finds it done or waits for it.
        let (settings, reqs, hash2) = (settings.clone(), reqs.to_vec(), hash.clone());
        tokio::spawn(async move {
            let _held = lock.lock().await;
            if dir.join(READY).is_file() {
                return Ok::<(), String>(());
            }
            let started = std::time::Instant::now();
            tokio::time::timeout(settings.build_timeout, build(&settings, &exe, &dir, &reqs))
                .await
                .map_err(|_| {
                    format!(
                        "building its Python environment took over {} s; raise serving.python.build_timeout_secs or check the package index",
                        settings.build_timeout.as_secs()
                    )
                })??;
            tracing::info!(env = %hash2, secs = started.elapsed().as_secs(), "built a Python environment for serving");
            Ok(())
        })
        .await
        .map_err(|e| format!("building its Python environment stopped: {e}"))??;
        Ok(env)
    }
}

/// The installation `interpreter` (found on the server's own `PATH`) belongs to,
/// `sys.base_prefix`, and its real executable: environments are made from that
/// executable, and a worker reads that installation.
async fn base_prefix(interpreter: &Path) -> Result<(PathBuf, PathBuf), String> {
    let out = tokio::process::Command::new(interpreter)
        .args([
            "-I",
            "-c",
            "import os, sys; print(sys.base_prefix); print(os.path.realpath(sys.executable))",
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            format!(
                "the Python runtime needs an interpreter: {} ({e}); set serving.python.interpreter",
                interpreter.display()
            )
        })?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lines = text.lines().map(str::trim);
    match (out.status.success(), lines.next(), lines.next()) {
        (true, Some(base), Some(exe)) if base.starts_with('/') && exe.starts_with('/') => {
            Ok((PathBuf::from(base), PathBuf::from(exe)))
        }
        _ => Err(format!(
            "{} did not say where it is installed",
            interpreter.display()
        )),
    }
}

/// Runs `program args` with a umask that lets a worker's uid read what it makes.
async fn run(program: &Path, args: &[&str], settings: &Settings) -> Result<(), String> {
    let mut c = tokio::process::Command::new("/bin/sh");
    c.arg("-c")
        .arg("umask 022 && exec \"$0\" \"$@\"")
        .arg(program)
        .args(args)
        .env_remove("PYTHONPATH")
        .env_remove("PIP_REQUIRE_VIRTUALENV")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PIP_NO_INPUT", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(url) = &settings.index_url {
        c.env("PIP_INDEX_URL", url);
    }
    let out = c
        .output()
        .await
        .map_err(|e| format!("starting {}: {e}", program.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = said.lines().rev().take(12).collect();
    Err(format!(
        "{} {} failed ({}):\n{}",
        program.display(),
        args.first().copied().unwrap_or_default(),
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// Builds the environment at `dir`: made beside it, then renamed into place.
async fn build(settings: &Settings, exe: &Path, dir: &Path, reqs: &[String]) -> Result<(), String> {
    let parent = dir
        .parent()
        .ok_or("the environments' directory has no parent")?;
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    let tmp = parent.join(format!(
        ".{}.building-{}",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("env"),
        std::process::id()
    ));
    let _ = tokio::fs::remove_dir_all(&tmp).await;
    let tmp_s = tmp.to_string_lossy().to_string();
    let outcome = async {
        run(exe, &["-m", "venv", &tmp_s], settings).await?;
        let reqs_file = tmp.join("qanat-requirements.txt");
        tokio::fs::write(&reqs_file, reqs.join("\n") + "\n")
            .await
            .map_err(|e| e.to_string())?;
        let py = tmp.join("bin").join("python");
        let reqs_s = reqs_file.to_string_lossy().to_string();
        run(
            &py,
            &[
                "-m",
                "pip",
                "install",
                "--quiet",
                "--only-binary=:all:",
                "-r",
                &reqs_s,
            ],
            settings,
        )
        .await?;
        tokio::fs::write(tmp.join(READY), b"")
            .await
            .map_err(|e| e.to_string())?;
        let _ = tokio::fs::remove_dir_all(dir).await;
        tokio::fs::rename(&tmp, dir)
            .await
            .map_err(|e| format!("moving the environment into place: {e}"))
    }
    .await;
    if outcome.is_err() {
        let _ = tokio::fs::remove_dir_all(&tmp).await;
    }
    outcome.map_err(|e| format!("building its Python environment: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_requirements_pass_and_mlflow_becomes_skinny() {
        let r = requirements(
            "mlflow==3.1.0\n# a comment\ncloudpickle==3.1.1\nscikit-learn==1.7.2 ; python_version >= '3.9'\n\nnumpy<3\n",
        )
        .expect("plain");
        assert_eq!(
            r,
            vec![
                "mlflow-skinny==3.1.0",
                "cloudpickle==3.1.1",
                "scikit-learn==1.7.2 ; python_version >= '3.9'",
                "numpy<3",
                "pandas",
                "pyarrow"
            ]
        );
    }

    #[test]
    fn a_conda_yaml_gives_its_pip_section_and_refuses_conda_packages() {
        // What `mlflow.pyfunc.log_model` writes.
        let mlflow = "channels:\n- conda-forge\ndependencies:\n- python=3.11.2\n- pip<=24.0\n- pip:\n  - mlflow==3.1.0\n  - cloudpickle==3.1.1\nname: mlflow-env\n";
        let lines = conda_pip_requirements(mlflow).expect("MLflow's own");
        assert_eq!(lines, "mlflow==3.1.0\ncloudpickle==3.1.1");
        assert_eq!(
            requirements(&lines).expect("checked")[..2],
            ["mlflow-skinny==3.1.0", "cloudpickle==3.1.1"]
        );
        for empty in ["name: x\n", "", "dependencies:\n"] {
            assert_eq!(conda_pip_requirements(empty).expect(empty), "");
        }
        for (bad, says) in [
            (
                "dependencies:\n- cudatoolkit=11.8\n",
                "conda package 'cudatoolkit=11.8'",
            ),
            ("dependencies: numpy\n", "'dependencies' as a list"),
            ("dependencies:\n- pip: numpy\n", "'pip' list"),
            ("dependencies:\n- pip:\n  - {a: b}\n", "invalid type"),
            (
                "dependencies:\n- pip:\n  - \"a\\nb\"\n",
                "more than one line",
            ),
            ("dependencies:\n- conda: [x]\n", "'conda' other than 'pip'"),
            ("dependencies:\n- [x]\n", "a package name or a 'pip' list"),
            ("dependencies: [\n", "did not find expected"),
            ("- a\n", "a mapping"),
        ] {
            let e = conda_pip_requirements(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        // The pip lines are then checked like requirements.txt's.
        let opt = conda_pip_requirements("dependencies:\n- pip:\n  - --index-url http://evil\n");
        assert!(requirements(&opt.expect("a pip line")).is_err());
        let big = format!("name: x\n#{}\n", "a".repeat(70 * 1024));
        assert!(conda_pip_requirements(&big)
            .expect_err("too big")
            .contains("over the"));
    }

    /// A few kilobytes of aliases standing for millions of entries are refused once the
    /// entries read pass the limit, having read no more than that.
    #[test]
    fn aliases_cannot_multiply_a_conda_yaml() {
        // Quadratic: one anchored list of n lines, used m times.
        let n = 2000;
        let mut doc = String::from("x: &l\n");
        for i in 0..n {
            doc.push_str(&format!("  - p{i}\n"));
        }
        doc.push_str("dependencies:\n");
        for _ in 0..2000 {
            doc.push_str("- pip: *l\n");
        }
        let e = conda_pip_requirements(&doc).expect_err("multiplied");
        assert!(e.contains("more than 1000"), "{e}");
        // Exponential: each level doubles the one before.
        let mut doc = String::from("a0: &a0 [p]\n");
        for i in 1..40 {
            doc.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
        }
        doc.push_str("dependencies:\n- pip: *a39\n");
        assert!(conda_pip_requirements(&doc).is_err());
        // Aliases within the limit read as what they name.
        let fine = "x: &v numpy==2.*\ndependencies:\n- pip: [*v, pandas]\n";
        assert_eq!(
            conda_pip_requirements(fine).expect("two lines"),
            "numpy==2.*\npandas"
        );
    }

    #[test]
    fn options_urls_and_paths_are_refused() {
        for bad in [
            "--index-url http://evil/simple",
            "-e .",
            "pkg @ https://evil/pkg.whl",
            "git+https://github.com/x/y",
            "./local",
            "/abs/path.whl",
            "pkg==1 $(id)",
        ] {
            assert!(requirements(bad).is_err(), "{bad}");
        }
    }
}

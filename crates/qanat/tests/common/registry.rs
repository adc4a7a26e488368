//! Registering model versions as the MLflow client lands them: files under the
//! artifact store, then a registered model and a version whose source they are.

use serde_json::json;

use super::Qanat;

impl Qanat {
    /// Registers `files` (name, bytes) as version 1 of model `name` in `default`, with
    /// `token`: the files under `model/` in a new experiment's artifacts, then the model
    /// and its version.
    pub fn register_files(&self, token: &str, name: &str, files: &[(&str, Vec<u8>)]) {
        let h = self.http();
        let (s, e) = h.send(
            token,
            "POST",
            "/api/2.0/mlflow/experiments/create",
            Some(json!({"name": format!("uploads-{name}")})),
        );
        assert_eq!(s, 200, "{e}");
        let exp = e["experiment_id"]
            .as_str()
            .expect("experiment id")
            .to_string();
        for (file, bytes) in files {
            let put = h
                .raw(
                    token,
                    "PUT",
                    &format!("/api/2.0/mlflow-artifacts/artifacts/{exp}/{name}/model/{file}"),
                )
                .body(bytes.clone())
                .send()
                .expect("upload");
            assert_eq!(put.status(), 200, "{file}");
        }
        for (path, body) in [
            ("registered-models/create", json!({"name": name})),
            (
                "model-versions/create",
                json!({"name": name, "source": format!("mlflow-artifacts:/{exp}/{name}/model")}),
            ),
        ] {
            let (s, v) = h.send(
                token,
                "POST",
                &format!("/api/2.0/mlflow/{path}"),
                Some(body),
            );
            assert_eq!(s, 200, "{v}");
        }
    }
}

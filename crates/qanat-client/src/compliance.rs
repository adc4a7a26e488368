//! The compliance report.

use qanat_types::governance::compliance::{ComplianceReport, ReportParams};
use reqwest::Method;

use crate::{project_path, Client, Error, Result};

impl Client {
    /// The compliance report of `params.project` (its admins) or of the whole
    /// installation (global admins).
    #[qanat_macros::boxed]
    pub async fn compliance_report(&self, params: &ReportParams) -> Result<ComplianceReport> {
        let (path, q) = report_path(params);
        self.get_query(&path, &q).await
    }

    /// The same report as an HTML page.
    #[qanat_macros::boxed]
    pub async fn compliance_report_html(&self, params: &ReportParams) -> Result<String> {
        let (path, mut q) = report_path(params);
        q.format = Some("html".into());
        let resp = self
            .send(self.request(Method::GET, &path).query(&q))
            .await?;
        resp.text().await.map_err(Error::Transfer)
    }
}

fn report_path(params: &ReportParams) -> (String, ReportParams) {
    match &params.project {
        Some(p) => (
            format!("{}/compliance/report", project_path(p)),
            ReportParams {
                project: None,
                ..params.clone()
            },
        ),
        None => ("/api/v1/compliance/report".into(), params.clone()),
    }
}

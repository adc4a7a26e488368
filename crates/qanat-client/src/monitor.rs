//! Monitoring: monitors of deployments, their checks, reports and alerts, and the
//! ground truth of past requests.

use bytes::Bytes;
use qanat_types::monitor::spec::MonitorSpec;
use qanat_types::monitor::wire::{
    AlertList, Check, CheckList, Label, Labels, LabelsStored, Monitor, MonitorList, MonitorStatus,
};
use reqwest::Method;

use crate::{project_path, seg, Client, Error, Result};

/// Which check: a number, or the newest.
fn check_seg(check: Option<i64>) -> String {
    check.map_or_else(|| "latest".to_string(), |n| n.to_string())
}

impl Client {
    fn monitor_path(project: &str, deployment: &str) -> String {
        format!("{}/monitors/{}", project_path(project), seg(deployment))
    }

    /// Creates the monitor of a deployment or replaces its spec (editors).
    #[qanat_macros::boxed]
    pub async fn put_monitor(
        &self,
        project: &str,
        deployment: &str,
        spec: &MonitorSpec,
    ) -> Result<Monitor> {
        self.with_body(Method::PUT, &Self::monitor_path(project, deployment), spec)
            .await
    }

    /// A project's monitors.
    #[qanat_macros::boxed]
    pub async fn monitors(&self, project: &str) -> Result<MonitorList> {
        self.get(&format!("{}/monitors", project_path(project)))
            .await
    }

    /// A monitor, its newest checks and alerts, and its labels.
    #[qanat_macros::boxed]
    pub async fn monitor_status(&self, project: &str, deployment: &str) -> Result<MonitorStatus> {
        self.get(&Self::monitor_path(project, deployment)).await
    }

    /// Deletes a monitor with its checks, alerts and labels.
    #[qanat_macros::boxed]
    pub async fn delete_monitor(&self, project: &str, deployment: &str) -> Result<()> {
        self.no_content(Method::DELETE, &Self::monitor_path(project, deployment))
            .await
    }

    /// The newest `limit` checks, newest first.
    #[qanat_macros::boxed]
    pub async fn monitor_checks(
        &self,
        project: &str,
        deployment: &str,
        limit: i64,
    ) -> Result<CheckList> {
        let path = format!("{}/checks", Self::monitor_path(project, deployment));
        self.get_query(&path, &[("limit", limit)]).await
    }

    /// One check (the newest with `None`).
    #[qanat_macros::boxed]
    pub async fn monitor_check(
        &self,
        project: &str,
        deployment: &str,
        check: Option<i64>,
    ) -> Result<Check> {
        let path = format!(
            "{}/checks/{}",
            Self::monitor_path(project, deployment),
            check_seg(check)
        );
        self.get(&path).await
    }

    /// A check's HTML report (the newest with `None`).
    #[qanat_macros::boxed]
    pub async fn monitor_report(
        &self,
        project: &str,
        deployment: &str,
        check: Option<i64>,
    ) -> Result<Bytes> {
        let path = format!(
            "{}/checks/{}/report",
            Self::monitor_path(project, deployment),
            check_seg(check)
        );
        let resp = self.send(self.request(Method::GET, &path)).await?;
        resp.bytes().await.map_err(Error::Transfer)
    }

    /// The newest `limit` alerts, newest first.
    #[qanat_macros::boxed]
    pub async fn monitor_alerts(
        &self,
        project: &str,
        deployment: &str,
        limit: i64,
    ) -> Result<AlertList> {
        let path = format!("{}/alerts", Self::monitor_path(project, deployment));
        self.get_query(&path, &[("limit", limit)]).await
    }

    /// Posts the ground truth of past requests of a deployment.
    #[qanat_macros::boxed]
    pub async fn post_labels(
        &self,
        project: &str,
        deployment: &str,
        labels: Vec<Label>,
    ) -> Result<LabelsStored> {
        let path = format!(
            "{}/deployments/{}/labels",
            project_path(project),
            seg(deployment)
        );
        self.with_body(Method::POST, &path, &Labels { labels })
            .await
    }
}

//! Jobs: submit, list, show, cancel, retry, logs; quotas and executors.

use qanat_types::jobs::wire::{
    ExecutorList, Job, JobDetail, JobList, JobListParams, LogChunk, LogParams, NewSchedule, Quota,
    QuotaUsage, Schedule, ScheduleList,
};
use qanat_types::jobs::JobSpec;
use reqwest::Method;

use crate::{project_path, seg, Client, Result};

impl Client {
    /// Submits a job (editors); it is stored when this returns.
    #[qanat_macros::boxed]
    pub async fn submit_job(&self, project: &str, spec: &JobSpec) -> Result<Job> {
        let path = format!("{}/jobs", project_path(project));
        self.with_body(Method::POST, &path, spec).await
    }

    /// A project's jobs, newest first.
    #[qanat_macros::boxed]
    pub async fn jobs(&self, project: &str, params: &JobListParams) -> Result<JobList> {
        let path = format!("{}/jobs", project_path(project));
        self.get_query(&path, params).await
    }

    /// A job with its spec and history.
    #[qanat_macros::boxed]
    pub async fn job(&self, project: &str, job_id: &str) -> Result<JobDetail> {
        self.get(&format!("{}/jobs/{}", project_path(project), seg(job_id)))
            .await
    }

    /// Cancels a job (editors).
    #[qanat_macros::boxed]
    pub async fn cancel_job(&self, project: &str, job_id: &str) -> Result<Job> {
        let path = format!("{}/jobs/{}/cancel", project_path(project), seg(job_id));
        self.with_body(Method::POST, &path, &serde_json::json!({}))
            .await
    }

    /// Queues a failed or cancelled job again (editors).
    #[qanat_macros::boxed]
    pub async fn retry_job(&self, project: &str, job_id: &str) -> Result<Job> {
        let path = format!("{}/jobs/{}/retry", project_path(project), seg(job_id));
        self.with_body(Method::POST, &path, &serde_json::json!({}))
            .await
    }

    /// A rank's log from an offset (long-polls with `wait_secs`).
    #[qanat_macros::boxed]
    pub async fn job_logs(
        &self,
        project: &str,
        job_id: &str,
        params: &LogParams,
    ) -> Result<LogChunk> {
        let path = format!("{}/jobs/{}/logs", project_path(project), seg(job_id));
        self.get_query(&path, params).await
    }

    /// A project's job quota and its use.
    #[qanat_macros::boxed]
    pub async fn quota(&self, project: &str) -> Result<QuotaUsage> {
        self.get(&format!("{}/quota", project_path(project))).await
    }

    /// Replaces a project's job quota (global admins).
    #[qanat_macros::boxed]
    pub async fn set_quota(&self, project: &str, quota: &Quota) -> Result<QuotaUsage> {
        let path = format!("{}/quota", project_path(project));
        self.with_body(Method::PUT, &path, quota).await
    }

    /// What the executors offer, GPUs included.
    #[qanat_macros::boxed]
    pub async fn executors(&self) -> Result<ExecutorList> {
        self.get("/api/v1/executors").await
    }

    /// Creates a cron schedule (editors).
    #[qanat_macros::boxed]
    pub async fn create_schedule(&self, project: &str, new: &NewSchedule) -> Result<Schedule> {
        let path = format!("{}/schedules", project_path(project));
        self.with_body(Method::POST, &path, new).await
    }

    /// A project's schedules.
    #[qanat_macros::boxed]
    pub async fn schedules(&self, project: &str) -> Result<ScheduleList> {
        self.get(&format!("{}/schedules", project_path(project)))
            .await
    }

    /// Deletes a schedule (editors).
    #[qanat_macros::boxed]
    pub async fn delete_schedule(&self, project: &str, id: &str) -> Result<()> {
        let path = format!("{}/schedules/{}", project_path(project), seg(id));
        self.no_content(Method::DELETE, &path).await
    }
}

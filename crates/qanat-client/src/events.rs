//! Webhooks and their delivery history (webhooks are created through MLflow's API).

use qanat_types::events::wire::{DeliveryList, DeliveryListParams, WebhookList};

use crate::{project_path, seg, Client, Result};

impl Client {
    /// A project's webhooks, newest first (maintainers).
    #[qanat_macros::boxed]
    pub async fn webhooks(&self, project: &str) -> Result<WebhookList> {
        self.get(&format!("{}/webhooks", project_path(project)))
            .await
    }

    /// A webhook's deliveries with their attempts, newest first (maintainers).
    #[qanat_macros::boxed]
    pub async fn webhook_deliveries(
        &self,
        project: &str,
        webhook_id: &str,
        params: &DeliveryListParams,
    ) -> Result<DeliveryList> {
        let path = format!(
            "{}/webhooks/{}/deliveries",
            project_path(project),
            seg(webhook_id)
        );
        self.get_query(&path, params).await
    }

    /// Every delivery of a project, webhooks' and NATS', newest first (maintainers).
    #[qanat_macros::boxed]
    pub async fn event_deliveries(
        &self,
        project: &str,
        params: &DeliveryListParams,
    ) -> Result<DeliveryList> {
        let path = format!("{}/event-deliveries", project_path(project));
        self.get_query(&path, params).await
    }
}

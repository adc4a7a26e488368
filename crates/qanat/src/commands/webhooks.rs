//! `qanat webhooks`: a project's registry webhooks and what happened to their
//! deliveries.

use anyhow::Result;
use qanat_events::wire::DeliveryListParams;
use qanat_events::{Delivery, Webhook};

use super::Ctx;
use crate::cli::WebhooksCmd;
use crate::output::{self, millis};

pub async fn run(ctx: &Ctx, project: &str, cmd: WebhooksCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        WebhooksCmd::Ls => output::list(format, &c.webhooks(project).await?.webhooks),
        WebhooksCmd::Deliveries {
            webhook_id,
            all: _,
            limit,
        } => {
            let params = DeliveryListParams { limit: Some(limit) };
            let list = match webhook_id {
                Some(id) => c.webhook_deliveries(project, &id, &params).await?,
                None => c.event_deliveries(project, &params).await?,
            };
            output::list(format, &list.deliveries)
        }
    }
}

fn event_names(w: &Webhook) -> String {
    w.events
        .iter()
        .filter_map(|e| qanat_events::EventType::from_mlflow(e).ok())
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

output::columns!(Webhook, |x| {
    "id" => x.webhook_id.clone(),
    "name" => x.name.clone(),
    "url" => x.url.clone(),
    "events" => event_names(x),
    "status" => format!("{:?}", x.status).to_uppercase(),
    "updated" => millis(Some(x.last_updated_timestamp)),
});

output::columns!(Delivery, |x| {
    "id" => x.delivery_id.clone(),
    "event" => x.event.clone(),
    "to" => output::opt(x.webhook_id.as_ref().or(Some(&x.target))),
    "status" => x.status.clone(),
    "attempts" => x.attempts.to_string(),
    "answer" => output::opt(x.response_status),
    "error" => output::opt(x.last_error.as_ref()),
    "created" => millis(Some(x.created_at)),
});

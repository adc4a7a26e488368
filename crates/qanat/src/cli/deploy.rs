//! `qanat deploy`.

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum DeployCmd {
    /// Create a deployment: `qanat deploy create fraud --model fraud --primary 3
    /// [--canary 4 --canary-weight 10] [--shadow @challenger] [--sticky]`. Its versions
    /// are loaded and health-probed before this returns; it answers at
    /// /oip/PROJECT/v2/models/NAME/infer (and, in the server's default project, at
    /// /v2/models/NAME/infer).
    Create {
        name: String,
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// Change a deployment (a new revision): flags given replace those parts of its
    /// spec; the rest stays.
    Update {
        name: String,
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// Give all the traffic to the canary (or, with no canary, the shadow), or to the
    /// target named with --to.
    Promote {
        name: String,
        /// The target to promote: a version (`4`) or an alias (`@challenger`).
        #[arg(long)]
        to: Option<String>,
    },
    /// Restore the previous revision, or --to REVISION.
    Rollback {
        name: String,
        #[arg(long)]
        to: Option<i64>,
    },
    /// A deployment: its spec and, per target, version, health, traffic, batches and
    /// how a shadow's answers compare.
    Status { name: String },
    /// The project's deployments.
    Ls,
    /// A deployment's revisions, newest first.
    History { name: String },
    /// Delete a deployment.
    Delete { name: String },
    /// The newest inference log records of a deployment (or a model served by name):
    /// time, version, who asked, latency, inputs and outputs (JSON with -o json).
    Log {
        name: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}

#[derive(Args, Default)]
pub struct SpecArgs {
    /// A YAML or JSON file with the spec (model, targets, routing, batching); flags
    /// given beside it override it.
    #[arg(long, short = 'f')]
    pub file: Option<std::path::PathBuf>,
    /// The registered model (create only: a deployment keeps its model).
    #[arg(long)]
    pub model: Option<String>,
    /// The primary target: a version (`3`) or an alias (`@champion`, followed when it
    /// moves).
    #[arg(long)]
    pub primary: Option<String>,
    /// A canary beside the primary: a version (`4`) or an alias (`@challenger`).
    #[arg(long, conflicts_with = "no_canary")]
    pub canary: Option<String>,
    /// The canary's share of the traffic, in percent (default 10).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub canary_weight: Option<u32>,
    /// Remove the canary.
    #[arg(long)]
    pub no_canary: bool,
    /// A shadow: gets a copy of every request; its answers are compared, never
    /// returned.
    #[arg(long, conflicts_with = "no_shadow")]
    pub shadow: Option<String>,
    /// Remove the shadow.
    #[arg(long)]
    pub no_shadow: bool,
    /// Route by a hash of the request's routing key (`X-Routing-Key` header or the
    /// `routing_key` parameter): an A/B test where a key keeps its side.
    #[arg(long, conflicts_with = "weighted")]
    pub sticky: bool,
    /// Route each request independently by weight (the default).
    #[arg(long)]
    pub weighted: bool,
    /// The most rows in one batch.
    #[arg(long)]
    pub max_batch_size: Option<usize>,
    /// How long a partial batch waits for more requests, in microseconds.
    #[arg(long)]
    pub max_queue_delay_us: Option<u64>,
    /// A batch size sent as soon as it forms (repeat for several).
    #[arg(long = "preferred-batch-size")]
    pub preferred_batch_sizes: Vec<usize>,
    /// The most requests waiting; more are refused with 429.
    #[arg(long)]
    pub max_queue_size: Option<usize>,
    /// Priority levels (a request's `priority` parameter: 1 is the highest).
    #[arg(long)]
    pub priority_levels: Option<u32>,
    /// The level of requests that name none.
    #[arg(long)]
    pub default_priority: Option<u32>,
    /// How long a request may queue when it gives no `timeout`, in microseconds.
    #[arg(long)]
    pub default_timeout_us: Option<u64>,
    /// Worker threads per version (0: one per core).
    #[arg(long)]
    pub instances: Option<usize>,
    /// The share of requests written to the inference log, 0 to 1 (default 1).
    #[arg(long)]
    pub log_sample: Option<f64>,
    /// An input written to the inference log as a keyed pseudonym (repeat for
    /// several).
    #[arg(long = "pii")]
    pub pii: Vec<String>,
    /// Read the model's inputs from this feature service's online features:
    /// requests then carry entity keys only.
    #[arg(long, value_name = "SERVICE", conflicts_with = "no_features")]
    pub features: Option<String>,
    /// Stop reading features (requests carry the model's inputs again).
    #[arg(long)]
    pub no_features: bool,
    /// When an entity's feature is missing or past its ttl: reject the request, or
    /// use the default (--feature-default, else null, imputed by the model).
    #[arg(long, value_name = "POLICY", value_parser = ["reject", "default"])]
    pub on_missing: Option<String>,
    /// A feature's default under --on-missing default, as NAME=VALUE (repeat for
    /// several; VALUE is a number, true/false or text).
    #[arg(long = "feature-default", value_name = "NAME=VALUE")]
    pub feature_defaults: Vec<String>,
}

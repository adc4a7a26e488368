//! `qanat optimize`: make a registered model version smaller and faster (an `optimize`
//! job), gated on its quality on a holdout.

use clap::Args;

#[derive(Args)]
pub struct OptimizeArgs {
    /// The version to optimize: NAME@VERSION or NAME@ALIAS (model: may be left out).
    #[arg(value_name = "MODEL")]
    pub model: String,
    /// int8: post-training dynamic quantization (int8 weights per output channel, int8
    /// activations per row at run time); int8-static: one activation scale a layer,
    /// calibrated on 60% of the --holdout dataset's rows (30% measure).
    #[arg(long, value_name = "SCHEME", conflicts_with_all = ["prune", "distill"])]
    pub quantize: Option<String>,
    /// magnitude (the smallest weights of each hidden layer) or structured (whole hidden
    /// units), then fine-tuning with the native trainer; needs --sparsity.
    #[arg(
        long,
        value_name = "KIND",
        requires = "sparsity",
        conflicts_with = "distill"
    )]
    pub prune: Option<String>,
    /// The share --prune removes, above 0 and below 1.
    #[arg(long, value_name = "SHARE")]
    pub sparsity: Option<f64>,
    /// Distill into a fresh native MLP with these hidden layer widths (e.g. 16 or 32,16),
    /// trained on the model's temperature-softened outputs and the labels.
    #[arg(long, value_name = "WIDTHS", value_delimiter = ',')]
    pub distill: Option<Vec<usize>>,
    /// Distillation's temperature [default: 2].
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Distillation's weight of the teacher; the rest goes to the labels [default: 0.7].
    #[arg(long, value_name = "WEIGHT")]
    pub alpha: Option<f64>,
    /// Epochs of fine-tuning after pruning [default: 5], or of training the student
    /// [default: 30].
    #[arg(long, value_name = "N")]
    pub finetune_epochs: Option<u32>,
    /// The dataset version both models are measured on: dataset:NAME@VERSION, with the
    /// model's feature columns and its target (with --prune, --distill or int8-static:
    /// 60% of its rows train or calibrate, 10% choose the epoch, 30% are the holdout).
    #[arg(long, value_name = "REF")]
    pub holdout: String,
    /// Most holdout accuracy points the result may lose (classification) [default: 1].
    #[arg(long, value_name = "POINTS")]
    pub max_accuracy_drop: Option<f64>,
    /// Most relative growth of the holdout RMSE (regression) [default: 0.01, i.e. 1%].
    #[arg(long, value_name = "SHARE")]
    pub max_error_increase: Option<f64>,
    /// The runtime both models are measured on, and the result is made for: native,
    /// tract or onnxruntime (the last two run the models' model.onnx) [default: native;
    /// tract for an ONNX model made elsewhere].
    #[arg(long, value_name = "RUNTIME")]
    pub runtime: Option<String>,
    /// An ONNX model made elsewhere (logged with mlflow.onnx, no Qanat signature): the
    /// holdout's target column. It quantizes (int8) or teaches a student (--distill).
    #[arg(long, value_name = "COLUMN")]
    pub target: Option<String>,
    /// An ONNX model made elsewhere: classification or regression [default: read from
    /// the target column].
    #[arg(long, value_name = "TASK")]
    pub task: Option<String>,
    /// An ONNX model made elsewhere with one [N, F] input: the F columns that fill it,
    /// in order (e.g. a,b,c) [default: its MLflow signature's, else the holdout's other
    /// columns].
    #[arg(long, value_name = "COLUMNS", value_delimiter = ',')]
    pub features: Option<Vec<String>>,
    /// Register the result even when it exceeds the budget.
    #[arg(long)]
    pub force: bool,
    /// Add the result to this registered model (default: the source's).
    #[arg(long, value_name = "MODEL")]
    pub register: Option<String>,
    #[command(flatten)]
    pub job: super::JobFlags,
}

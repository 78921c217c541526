//! Peak prediction: decaying usage histograms ([`histogram`]) and the prod-reclaimable
//! predictors built on their percentiles ([`predictor`]). The agent trains the histograms
//! from its metric store and reports the result as the NodeMetric's `prodReclaimableMetric`.

pub mod histogram;
pub mod predictor;

pub use histogram::{BucketScheme, DecayingHistogram, HistogramCheckpoint};
pub use predictor::{
    Amounts, MissingModel, PredictInput, PredictPod, PredictSettings, ProdReclaimable,
    predict_prod_reclaimable,
};

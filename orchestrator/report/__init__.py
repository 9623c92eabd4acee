"""Reports rendered from run directories alone: per-campaign summaries with plots, a
cross-campaign decision log, and exports (CSV, Parquet, MLflow)."""

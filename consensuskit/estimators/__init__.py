"""scikit-learn style estimators for the generative consensus models."""

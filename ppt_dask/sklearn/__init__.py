"""The scikit-learn estimators: PPTClassifier and PPTRegressor over the engine."""

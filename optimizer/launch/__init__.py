"""Deployable artifacts for a planned deployment: engine launch commands (one module per
engine), a Kubernetes manifest and a benchmark command that checks the prediction.
Flag names follow the engines' documentation at the versions cited in each module and in
docs/DEPLOY.md."""

"""Commands that work on models and responses outside a training run: `rft generate` (responses of a model to a
prompt file), `rft eval` (scores and pass@k of those responses) and `rft merge` (a checkpoint to a Hugging Face
folder)."""

from harness.app.cli import entrypoint

entrypoint()

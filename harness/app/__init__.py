"""The application: typer CLI, run orchestration, parallel start, model preparation."""

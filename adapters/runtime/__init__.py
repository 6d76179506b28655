"""What runs an engine, whichever it is: its environment (``envs``, ``recipes``, ``gpu_recipes``,
``installer``, ``venv_engine``), its server process (``process``, ``server``, ``watchdog``,
``leftovers``) and the process group's resources (``resources``)."""

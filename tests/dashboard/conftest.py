from tests.serving import no_engine, runner, session_runner, tiny_config  # noqa: F401  (fixtures)

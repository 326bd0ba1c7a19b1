"""The model package reads its settings through ``ModelSettings`` (issue 21 item 5): it
imports no configuration, and ``ModelConfig`` has the shape it reads."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import engine.llm
from engine.config import ModelConfig
from engine.llm.protocols import ModelSettings

LLM = Path(engine.llm.__file__).parent


def test_the_llm_package_imports_no_configuration() -> None:
    offending = {
        path.name
        for path in LLM.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine.config")
    }
    assert offending == set()


def test_model_config_has_every_setting_the_models_read() -> None:
    wanted = {name for name in vars(ModelSettings) if not name.startswith("_")}
    assert wanted <= {field.name for field in fields(ModelConfig)}

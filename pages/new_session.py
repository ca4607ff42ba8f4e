"""New session: a problem (bundled, uploaded or pasted), a backend, a device, a review mode and budgets; starting it
starts a worker process for it and opens its Session page."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from components.style import apply as apply_style
from pages._context import store
from pipeline import api
from pipeline.sessions.backends import BackendError, BackendSpec, default_backend
from pipeline.stages.method import Budget

REVIEW_HELP = {
    "every": "stop at every gate: plans, kernels, verdicts and stage ends",
    "plans": "stop at plans and kernels; verdicts and stage ends pass on their own",
    "stage_ends": "stop only where a stage hands its decisions to the next",
    "auto": "no gate waits (what `egg optimize` does)",
}
BACKENDS = {
    "expert": "egg's expert backend (rules, templates and search; no model, no key)",
    "llm": "a language model (OpenAI, Anthropic, or any OpenAI-compatible server)",
    "script": "a script of hand-written replies (demos, controlled experiments)",
    "none": "nobody: plans by rules, you write every kernel",
}


def init_page_state() -> None:
    st.session_state.setdefault("new_error", "")


def problem_choice() -> dict | None:
    """The problem as create_session takes it, or None (with the reason shown) when there is none yet."""
    kind = st.radio("Problem", ["bundled", "upload", "paste"], horizontal=True, key="problem_kind",
                    format_func={"bundled": "a bundled problem", "upload": "upload a .py", "paste": "paste source"}.get)
    if kind == "bundled":
        problems = api.bundled_problems()
        labels = {p.path: p.label for p in problems}
        path = st.selectbox("Bundled problem (tiny ones run on a CPU; suite ones are sized for a GPU)", list(labels), format_func=labels.get,
                            key="problem_bundled")
        with st.expander("its source"):
            st.code(Path(path).read_text(encoding="utf-8"), language="python")
        return {"problem_path": path}
    if kind == "upload":
        upload = st.file_uploader("A KernelBench-format problem file", type=["py"], key="problem_upload")
        if upload is None:
            return None
        try:
            source = api.uploaded_source(upload.getvalue(), upload.name)
        except api.ApiError as error:  # not UTF-8, or a name no file system takes
            st.error(str(error))
            return None
        return {"problem_source": source, "problem_filename": upload.name}
    text = st.text_area("Problem source (class Model, get_inputs, get_init_inputs)", height=260, key="problem_paste")
    name = st.text_input("File name", value="pasted_problem.py", key="problem_paste_name")
    return {"problem_source": text, "problem_filename": name} if text.strip() else None


def backend_choice() -> BackendSpec | None:
    try:
        default = default_backend()
    except BackendError as error:
        st.error(f"the model configuration is broken: {error}")
        default = BackendSpec("expert")
    if default.kind == "expert":
        st.caption("No model configured (EGG_LLM or egg.yaml): the default is egg's expert backend.")
    kind = st.radio("Backend", list(BACKENDS), index=list(BACKENDS).index(default.kind), format_func=BACKENDS.get, key="backend_kind")
    if kind == "llm":
        spec = st.text_input("Model (PROVIDER:MODEL\\[@BASE_URL\\])", value=default.spec if default.kind == "llm" else os.environ.get("EGG_LLM", ""),
                             key="backend_spec", placeholder="openai:gpt-5.1")
        return BackendSpec("llm", spec.strip(), default.config) if spec.strip() else None
    if kind == "script":
        examples = sorted((api.pipeline.ROOT / "examples" / "scripts").glob("*.yaml"))
        path = st.text_input("Script file (YAML: replies per agent)", value=str(examples[0]) if examples else "", key="backend_script",
                             help="the bundled ones: " + ", ".join(p.name for p in examples))
        return BackendSpec("script", path.strip()) if path.strip() else None
    return BackendSpec(kind)


def budget_choice(backend_kind: str | None) -> Budget:
    """The budgets; the model-call budget only where a model is called (it would do nothing otherwise)."""
    model = backend_kind in ("llm", "script")  # a script answers as a model does, call by call
    columns = st.columns(5)
    return Budget(seeds=columns[0].number_input("seeds", 1, 5, 3, key="budget_seeds"),
                  rounds=columns[1].number_input("rounds per sub-stage", 0, 10, 2, key="budget_rounds"),
                  debug_rounds=columns[2].number_input("repairs per failure", 0, 5, 2, key="budget_debug"),
                  tune_evals=columns[3].number_input("tuning evaluations", 0, 50, 6, key="budget_tune"),
                  max_llm_calls=columns[4].number_input("model calls at most", 1, 1000, 120, key="budget_calls", disabled=not model,
                                                        help="calls to the model (or the script)" if model else "only a model or script backend makes model calls"))


def start(problem: dict, backend: BackendSpec, review: str, device: str, budget: Budget, label: str) -> str | None:
    """Create the session and start its worker; its id, or None with the reason kept for the page."""
    handle = store()
    try:
        record = api.create_session(handle, backend=backend, review=review, device=device, budget=budget, label=label, **problem)
        api.start_worker(handle, record.id)
    except (api.ApiError, api.StoreError) as error:
        st.session_state["new_error"] = str(error)
        return None
    st.session_state["new_error"] = ""
    return record.id


def render() -> None:
    st.title("New session")
    st.caption("One problem through the method: seeds, then parallel mapping, tiling and memory, stopping where you review.")
    problem = problem_choice()
    backend = backend_choice()
    left, right = st.columns(2)
    device = left.radio("Device", ["auto", "cuda", "cpu"], horizontal=True, key="device",
                        help="auto: the GPU when one is visible; cpu checks correctness only (Triton's interpreter, no timing)")
    if device == "auto" and not api.gpu_visible():
        left.caption("no GPU visible here: the session will run on the CPU (correctness only)")
    review = right.radio("Review", list(REVIEW_HELP), horizontal=True, key="review", help="\n".join(f"{k}: {v}" for k, v in REVIEW_HELP.items()))
    right.caption(REVIEW_HELP[review])
    budget = budget_choice(st.session_state.get("backend_kind"))
    label = st.text_input("Label (optional)", key="label")
    ready = problem is not None and backend is not None
    # Not a callback: the rerun a click makes carries every widget's current value.
    if st.button("Start the session", key="start_session", type="primary", disabled=not ready):
        session_id = start(problem, backend, review, device, budget, label)
        if session_id is not None:
            st.switch_page("pages/session.py", query_params={"id": session_id})
    if st.session_state["new_error"]:
        st.error(st.session_state["new_error"])


init_page_state()
apply_style()
render()

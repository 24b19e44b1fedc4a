"""Command line of the simulated SGLang server: `python -m simulator --port 30000 [options]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from argchecks import non_negative_float, non_negative_int, port_number, positive_float, positive_int, share
from argchecks.parser import ToolParser
from simulator.config import DEFAULT_MODEL_NAME, ChatTemplateName, FaultRates, SimConfig
from simulator.kinds import KindError, figures, kind_keys
from simulator.server import serve_forever
from simulator.tiny_tokenizer import TinyTokenizerError, tiny_tokenizer_dir
from simulator.tokens import check_dir

_DESCRIPTION = """\
Serve over HTTP what a client sees of an SGLang 0.5.23 server running Qwen3.6-27B with
--reasoning-parser qwen3 and --tool-call-parser qwen3_coder: streaming and non-streaming
/v1/chat/completions, /health, /v1/models, /v1/loads, /get_load, /metrics, /server_info, and with
--tokenizer /generate, /v1/tokenize, /v1/detokenize, /separate_reasoning and /parse_function_call.
Replies are deterministic in the request content and --seed; throughput follows a GPU-like
capacity model (bounded batch per DP rank, FIFO queue); failures can be injected at given rates."""

_EPILOG = """\
Step cost: (step_ms * (1 + batch_cost * batch / max_running) + request_ms * batch) / speed milliseconds,
plus prefill_ms_per_1k per 1000 prompt tokens admitted in that step. The defaults give ~50 tok/s for a
lone stream and ~1.6K tok/s per rank at a full batch of 64 (x tokens-per-chunk with MTP). --gpu-kind
KIND sets the capacity options to that GPU's modelled figures (simulator/kinds.py, client/estimate/
gpus.toml); options given beside it win.
Fault rates are shares of one uniform draw per request, taken in the order listed."""


def build_parser() -> argparse.ArgumentParser:
    d = SimConfig()
    f = FaultRates()
    p = ToolParser(prog="python -m simulator", description=_DESCRIPTION, epilog=_EPILOG,
                   formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("server")
    g.add_argument("--host", default=d.host, help="address to bind (default: %(default)s)")
    g.add_argument("--port", type=port_number, default=d.port, help="port to bind; 0 picks one (default: %(default)s)")
    g.add_argument("--model-name", default=DEFAULT_MODEL_NAME,
                   help="served model name, as SGLang's --served-model-name (default: %(default)s)")
    g.add_argument("--strict-model", action="store_true",
                   help="answer 404 model_not_found to a chat request for another model; real SGLang "
                        "does not check the name and echoes it back")
    g.add_argument("--startup-delay", type=non_negative_float, default=d.startup_delay,
                   help="seconds during which /health and chat answer 503 (default: %(default)s)")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of the reply content (default: %(default)s)")
    g.add_argument("--fault-seed", type=int, default=None,
                   help="seed of the fault draws (default: --seed); give each server of a fleet its own")
    g.add_argument("--accelerator", default=d.accelerator, metavar="NAME",
                   help="the device /v1/loads names, e.g. 'NVIDIA B200' (default: %(default)s)")
    g.add_argument("--num-accelerators", type=positive_int, default=d.num_accelerators, metavar="N",
                   help="GPUs behind each DP rank, as /v1/loads reports them (SGLang: tp x pp) "
                        "(default: %(default)s)")
    g.add_argument("--log-level", default=d.log_level,
                   choices=["debug", "info", "warning", "error"], help="(default: %(default)s)")

    g = p.add_argument_group("capacity model")
    g.add_argument("--gpu-kind", metavar="KIND",
                   help=f"play one replica of Qwen3.6-27B on this GPU kind ({', '.join(kind_keys())}): its slots "
                        "from the launcher's memory plan, its decode step by batch, prefill rate and MTP accepted "
                        "length from client/estimate/gpus.toml, and its name in /v1/loads (default: a generic GPU)")
    g.add_argument("--gpu-dtype", choices=["bf16", "fp8"], default="bf16",
                   help="the weights --gpu-kind is planned for (default: %(default)s)")
    g.add_argument("--max-running", type=positive_int, default=d.max_running,
                   help="requests decoding at once per DP rank, as --max-running-requests (default: %(default)s)")
    g.add_argument("--dp-size", type=positive_int, default=d.dp_size, help="DP ranks (default: %(default)s)")
    g.add_argument("--speed", type=positive_float, default=d.speed,
                   help="time compression; 50 makes everything 50x faster (default: %(default)s)")
    g.add_argument("--step-ms", type=non_negative_float, default=d.step_ms,
                   help="decode step of a lone request, ms (default: %(default)s)")
    g.add_argument("--batch-cost", type=non_negative_float, default=d.batch_cost,
                   help="extra step cost at a full batch, as a share of --step-ms (default: %(default)s)")
    g.add_argument("--request-ms", type=non_negative_float, default=d.request_ms,
                   help="step time each running request adds, ms (default: %(default)s)")
    g.add_argument("--prefill-ms-per-1k", type=non_negative_float, default=d.prefill_ms_per_1k,
                   help="step time added per 1000 prompt tokens admitted (default: %(default)s)")
    g.add_argument("--tokens-per-chunk", type=positive_int, default=d.tokens_per_chunk,
                   help="tokens per decode step and chunk, as with MTP (default: %(default)s)")
    g.add_argument("--accept-length", type=_accept_length, default=d.accept_length, metavar="X",
                   help="MTP's accepted length: mean tokens a request gains per step, drawn as the whole numbers "
                        "around it (an alternative to --tokens-per-chunk) (default: %(default)s)")
    g.add_argument("--random-chunk", action="store_true",
                   help="draw 1..--tokens-per-chunk tokens per step instead of a fixed count")
    g.add_argument("--max-total-tokens", type=positive_int, default=d.max_total_tokens,
                   help="KV cache capacity per rank in tokens; admission waits when full (default: %(default)s)")

    g = p.add_argument_group("replies")
    g.add_argument("--mean-tokens", type=positive_int, default=d.mean_tokens,
                   help="mean reasoning+content tokens of a thinking reply (default: %(default)s)")
    g.add_argument("--max-gen-tokens", type=positive_int, default=d.max_gen_tokens,
                   help="context-like cap; a reply that reaches it ends with finish_reason length "
                        "(default: %(default)s)")
    g.add_argument("--tool-call-rate", type=share, default=d.tool_call_rate,
                   help="share of requests with tools that answer with tool calls (default: %(default)s)")
    g.add_argument("--loop-rate", type=share, default=d.loop_rate,
                   help="share of replies that loop: after a normal start one passage of 12-120 word pieces "
                        "repeats (in the reasoning; in the content without thinking) until max_tokens or "
                        "--max-gen-tokens, finish_reason length; which prompts loop follows from their content "
                        "and --seed (default: %(default)s)")
    g.add_argument("--think-tail-rate", type=share, default=d.think_tail_rate,
                   help="share of thinking replies whose reasoning length is drawn from a heavy tail: Pareto "
                        "from --mean-tokens with exponent --think-tail-alpha (default: %(default)s, off)")
    g.add_argument("--think-tail-alpha", type=positive_float, default=d.think_tail_alpha,
                   help="exponent of that tail; smaller is heavier, 1.2 gives a median of 1.8x and a mean of "
                        "6x --mean-tokens before the cap (default: %(default)s)")
    g.add_argument("--reasoning-field", choices=["reasoning_content", "reasoning"], default=d.reasoning_field,
                   help="delta/message field of the reasoning text; 'reasoning' is vLLM's (default: %(default)s)")
    g.add_argument("--omit-done", action="store_true", help="never send data: [DONE]")
    g.add_argument("--omit-nulls", action="store_true", help="drop null fields from stream chunks")
    g.add_argument("--tokenizer", metavar="DIR|tiny|none", default="tiny",
                   help="a tokenizer.json and the chat template (chat_template.jinja, or tokenizer_config.json's "
                        "chat_template): prompts are rendered and counted as SGLang does, and replies carry "
                        "their ids where asked (response_token_ids, sglext input_ids/output_ids). tiny: the "
                        "project's own tiny Qwen-style tokenizer (simulator.tiny_tokenizer, built offline on "
                        "first use and cached). none: no ids, prompts counted as a token per 4 bytes "
                        "(default: %(default)s)")
    g.add_argument("--context-length", type=positive_int, default=d.context_length,
                   help="SGLang's --context-length: longer prompts and larger max_tokens are refused "
                        "(default: %(default)s)")
    g.add_argument("--chat-template", choices=["qwen3.6", "qwen3"], default=d.chat_template,
                   help="the model played: qwen3.6 serves Qwen3.6-27B's own chat template and writes what that "
                        "model writes (think blocks, tool calls as XML <function=NAME><parameter=ARG>, parsed as "
                        "SGLang's qwen3 reasoning parser and qwen3_coder detector parse them); qwen3 serves the "
                        "Qwen3-style template simulator/qwen3_chat_template.jinja (hermes JSON tool calls). The "
                        "tiny tokenizer carries this template; a --tokenizer DIR brings its own "
                        "(default: %(default)s)")
    g.add_argument("--incremental-streaming-output", action="store_true",
                   help="SGLang's flag: each event of a streamed /generate carries only the new text and ids "
                        "(default: the text and ids so far, as SGLang streams by default)")
    g.add_argument("--tool-call-parser", choices=["qwen3_coder", "qwen"], default=d.tool_call_parser,
                   help="SGLang's --tool-call-parser; qwen strips the non-streaming text before a call and, "
                        "streaming, loses the text that shares a chunk with the call's start, as SGLang 0.5.23 "
                        "does (default: %(default)s)")

    g = p.add_argument_group("fault injection (rates in [0, 1], per request)")
    g.add_argument("--fail-500", type=share, default=f.fail_500, help="HTTP 500 before streaming")
    g.add_argument("--fail-429", type=share, default=f.fail_429, help="HTTP 429 with a Retry-After header")
    g.add_argument("--retry-after", type=non_negative_int, default=f.retry_after,
                   help="Retry-After seconds of a 429 (default: %(default)s)")
    g.add_argument("--drop-stream", type=share, default=f.drop_stream,
                   help="send part of the reply, then abort the TCP connection")
    g.add_argument("--stall-stream", type=share, default=f.stall_stream,
                   help="send part of the reply, then nothing for --stall-seconds")
    g.add_argument("--stall-seconds", type=non_negative_float, default=f.stall_seconds, help="(default: %(default)s)")
    g.add_argument("--error-event", type=share, default=f.error_event,
                   help='send part of the reply, then data: {"error": ...} and end the stream')
    return p


def _accept_length(text: str) -> float:
    value = positive_float(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The options, with --gpu-kind's figures as the defaults of the capacity options it sets: options given
    beside it win."""
    first = parser.parse_args(argv)
    if first.gpu_kind is None:
        return first
    try:
        played = figures(first.gpu_kind, first.gpu_dtype)
    except KindError as exc:
        parser.error(f"--gpu-kind: {exc}")
    args = played.sim_args()
    parser.set_defaults(**{args[i].lstrip("-").replace("-", "_"): _typed(args[i + 1]) for i in range(0, len(args), 2)},
                        gpu_kind=played.kind)
    return parser.parse_args(argv)


def _typed(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _tokenizer_dir(parser: argparse.ArgumentParser, value: str, template: ChatTemplateName) -> str | None:
    """--tokenizer as the path SimConfig takes: `none` is no tokenizer, `tiny` the built one (with the
    --chat-template's template)."""
    if value == "none":
        return None
    if value == "tiny":
        try:
            return str(tiny_tokenizer_dir(chat_template=template))
        except TinyTokenizerError as exc:
            parser.error(f"--tokenizer tiny: {exc}")
    try:
        check_dir(Path(value))
    except (OSError, ValueError) as exc:
        parser.error(f"--tokenizer: {exc}")
    return value


def config_from_args(argv: Sequence[str] | None = None) -> SimConfig:
    parser = build_parser()
    a = _parse(parser, argv)
    if a.accept_length > 1 and a.tokens_per_chunk > 1:
        parser.error("give --accept-length or --tokens-per-chunk, not both")
    a.tokenizer = _tokenizer_dir(parser, a.tokenizer, a.chat_template)
    if a.context_length < 2:
        parser.error("--context-length must be at least 2")
    faults = FaultRates(fail_500=a.fail_500, fail_429=a.fail_429, drop_stream=a.drop_stream,
                        stall_stream=a.stall_stream, error_event=a.error_event, retry_after=a.retry_after,
                        stall_seconds=a.stall_seconds)
    return SimConfig(
        host=a.host, port=a.port, model_name=a.model_name, seed=a.seed, fault_seed=a.fault_seed,
        max_running=a.max_running, dp_size=a.dp_size, speed=a.speed, step_ms=a.step_ms,
        batch_cost=a.batch_cost, request_ms=a.request_ms, prefill_ms_per_1k=a.prefill_ms_per_1k,
        tokens_per_chunk=a.tokens_per_chunk, accept_length=a.accept_length, gpu_kind=a.gpu_kind,
        random_chunk=a.random_chunk, max_total_tokens=a.max_total_tokens, startup_delay=a.startup_delay,
        mean_tokens=a.mean_tokens, max_gen_tokens=a.max_gen_tokens, tool_call_rate=a.tool_call_rate,
        loop_rate=a.loop_rate, think_tail_rate=a.think_tail_rate, think_tail_alpha=a.think_tail_alpha,
        reasoning_field=a.reasoning_field, omit_done=a.omit_done, omit_nulls=a.omit_nulls,
        strict_model=a.strict_model, faults=faults, log_level=a.log_level, tokenizer=a.tokenizer,
        context_length=a.context_length, tool_call_parser=a.tool_call_parser, chat_template=a.chat_template,
        incremental_streaming_output=a.incremental_streaming_output, accelerator=a.accelerator,
        num_accelerators=a.num_accelerators,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = config_from_args(argv)
    logging.basicConfig(level=config.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve_forever(config))
    except OSError as exc:
        logging.getLogger("simulator").error("cannot serve on %s:%d: %s", config.host, config.port, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

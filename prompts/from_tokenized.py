"""Recover PromptRecords from a tokenized training set (input_ids + loss_mask, parquet or Arrow).

This module owns undoing a Qwen-style chat template: the prompt part of each row (everything before
the last stretch of loss_mask 1, i.e. before the old response) is decoded with special tokens kept and
split at `<|im_start|>ROLE ... <|im_end|>`. The system turn's `<tools></tools>` block (one JSON schema
per line) becomes the record's `tools`; a user turn made only of `<tool_response>` blocks becomes tool
turns answering the previous assistant turn's calls in order; an assistant turn's `<think>` block
becomes `reasoning_content` and its `<tool_call>` blocks (JSON or `<function=...>` XML) become
`tool_calls`. The old response is dropped: it is what is being regenerated. Rows without a loss mask
(or with none set) lose their final assistant turn instead.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from tokenizers import Tokenizer

from argchecks.parser import ToolParser
from prompts.convert_io import EXIT_CODES_HELP, EXIT_USAGE, ConvertOptions, Item
from prompts.from_hf import Row, TableError, add_common, iter_rows, run_rows
from prompts.normalize import ConvertError, normalize_tools, record_id

START, END = "<|im_start|>", "<|im_end|>"
_THINK = re.compile(r"\A\s*<think>(.*?)</think>\s*", re.S)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_TOOL_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.S)
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)
# The block itself starts on its own line; the preamble before it mentions "<tools></tools>" in prose.
_TOOLS = re.compile(r"<tools>\n(.*?)\n?</tools>", re.S)
_ID_COLUMNS = ("id", "uid", "uuid", "sample_id")
# Where Qwen3.5/3.6's instructions for the XML calls end, in the system turn.
_QWEN36_TOOLS_END = "</IMPORTANT>"


def prompt_ids(input_ids: list[int], loss_mask: list[int] | None) -> tuple[list[int], bool]:
    """(the ids before the last stretch of loss_mask 1, whether such a stretch was found)."""
    if not loss_mask or not any(loss_mask):
        return input_ids, False
    end = len(loss_mask) - 1
    while loss_mask[end] == 0:
        end -= 1
    start = end
    while start > 0 and loss_mask[start - 1]:
        start -= 1
    return input_ids[:start], True


def split_turns(text: str) -> list[tuple[str, str]]:
    """(role, body) of every whole turn; an unterminated last turn (a generation prompt) is left out."""
    turns = []
    for chunk in text.split(START)[1:]:
        end = chunk.find(END)
        if end < 0:
            continue
        header, _, body = chunk[:end].partition("\n")
        turns.append((header.strip(), body))
    return turns


def _system(body: str) -> tuple[str | None, list[dict[str, Any]] | None]:
    """The system text without the template's tool preamble, and the tools it lists."""
    block = _TOOLS.search(body)
    if block is None:
        return body, None
    try:
        tools = [orjson.loads(line) for line in block.group(1).splitlines() if line.strip()]
    except orjson.JSONDecodeError as exc:
        raise ConvertError(f"the system turn's <tools> block holds a line that is not JSON: {exc}") from None
    marker = body.find("# Tools")
    text = body[:marker].rstrip("\n") if marker >= 0 else ""
    if not text and _QWEN36_TOOLS_END in body:
        # Qwen3.5/3.6 write the system text after the tools and their instructions, not before them.
        text = body.split(_QWEN36_TOOLS_END, 1)[1].strip("\n")
    return (text or None), normalize_tools(tools, "the <tools> block")


def _xml_call(body: str) -> tuple[str, dict[str, Any]] | None:
    match = _FUNCTION.search(body)
    if match is None:
        return None
    arguments: dict[str, Any] = {}
    for name, raw in _PARAMETER.findall(match.group(2)):
        try:
            arguments[name.strip()] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            arguments[name.strip()] = raw
    return match.group(1).strip(), arguments


def _tool_calls(text: str, turn: int) -> tuple[str, list[dict[str, Any]]]:
    calls = []
    for k, block in enumerate(_TOOL_CALL.findall(text)):
        parsed = _xml_call(block)
        if parsed is None:
            try:
                obj = orjson.loads(block)
            except orjson.JSONDecodeError:
                raise ConvertError(f"a <tool_call> block of turn {turn} is neither JSON nor <function=...>") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                raise ConvertError(f"a <tool_call> block of turn {turn} has no function name")
            arguments = obj.get("arguments", {})
            if isinstance(arguments, str):
                arguments = orjson.loads(arguments or "{}")
            parsed = (obj["name"], arguments)
        calls.append({"id": f"call_{turn}_{k}", "type": "function",
                      "function": {"name": parsed[0], "arguments": orjson.dumps(parsed[1]).decode()}})
    return _TOOL_CALL.sub("", text), calls


def _assistant(body: str, turn: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant"}
    think = _THINK.match(body)
    if think is not None:
        reasoning = think.group(1).strip("\n")
        if reasoning:
            message["reasoning_content"] = reasoning
        body = body[think.end():]
    content, calls = _tool_calls(body, turn)
    content = content.strip("\n")
    message["content"] = content if content or not calls else None
    if calls:
        message["tool_calls"] = calls
    return message


def to_messages(turns: list[tuple[str, str]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    messages: list[dict[str, Any]] = []
    tools = None
    waiting: list[str] = []
    for index, (role, body) in enumerate(turns):
        if role == "system" and index == 0:
            text, tools = _system(body)
            if text is not None:
                messages.append({"role": "system", "content": text})
        elif role == "user" and body.strip().startswith("<tool_response>") and body.strip().endswith(
                "</tool_response>"):
            for k, result in enumerate(_TOOL_RESPONSE.findall(body)):
                call_id = waiting.pop(0) if waiting else f"call_{index}_{k}"
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        elif role == "assistant":
            message = _assistant(body, index)
            waiting = [call["id"] for call in message.get("tool_calls", [])]
            messages.append(message)
        else:
            messages.append({"role": role, "content": body})
    return messages, tools


class Recover:
    """Row -> PromptRecord with one tokenizer; used as the converter of `run_rows`."""

    def __init__(self, tokenizer: Tokenizer, ids_column: str, mask_column: str) -> None:
        self.tokenizer = tokenizer
        self.ids_column = ids_column
        self.mask_column = mask_column

    def __call__(self, row: Row, item: Item, options: ConvertOptions) -> dict[str, Any]:
        ids = row.get(self.ids_column)
        if not isinstance(ids, list) or not ids:
            raise ConvertError(f"{self.ids_column} is missing or empty")
        mask = row.get(self.mask_column)
        if mask is not None and (not isinstance(mask, list) or len(mask) != len(ids)):
            raise ConvertError(f"{self.mask_column} does not match {self.ids_column} in length")
        head, had_response = prompt_ids(ids, mask)
        text = self.tokenizer.decode(head, skip_special_tokens=False)
        messages, tools = to_messages(split_turns(text))
        if not had_response and messages and messages[-1]["role"] == "assistant":
            messages.pop()  # no loss mask says where the response is: the last assistant turn is it
        if not messages:
            raise ConvertError(f"no chat turn (<|im_start|>role ... <|im_end|>) before the response: {text[:80]!r}")
        fallback = f"{options.id_prefix}{item.line}"
        found = next((row[c] for c in _ID_COLUMNS if row.get(c) not in (None, "")), None)
        record: dict[str, Any] = {"id": record_id(found, fallback), "messages": messages}
        if tools:
            record["tools"] = tools
        return record


def load_tokenizer(path: Path) -> Tokenizer:
    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust side raises a bare Exception for every failure
        raise TableError(f"--tokenizer {file}: cannot load: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    prog = "python -m prompts.from_tokenized"
    parser = ToolParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Turn a tokenized dataset (input_ids + loss_mask, parquet or Arrow) back into PromptRecord "
                    "JSONL: decode the prompt part, split it at the chat-template markers, drop the old response.",
        epilog=f"example:\n  {prog} train.parquet --tokenizer models/Qwen3.6-27B --out prompts.jsonl\n\n"
               f"problems are reported as FILE:ROW (1-based row in that file).\n\n{EXIT_CODES_HELP}")
    parser.add_argument("input", metavar="FILE", type=Path, help="a .parquet or .arrow file, or a directory of them")
    parser.add_argument("--tokenizer", required=True, type=Path, metavar="PATH",
                        help="tokenizer.json, or the model directory that holds it")
    parser.add_argument("--ids-column", default="input_ids", help="(default: %(default)s)")
    parser.add_argument("--mask-column", default="loss_mask", help="(default: %(default)s)")
    add_common(parser, "tok-")
    args = parser.parse_args(argv)
    try:
        tokenizer = load_tokenizer(args.tokenizer)
    except TableError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    rows: Iterator[tuple[str, int, Row]] = iter_rows(args.input)
    return run_rows(args, prog, rows, Recover(tokenizer, args.ids_column, args.mask_column))


if __name__ == "__main__":
    raise SystemExit(main())

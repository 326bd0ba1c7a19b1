"""A stdio MCP server written by hand (JSON-RPC lines), for results no SDK server sends.

Its tools come from ``TOOLS_JSON`` (a JSON list of tool objects; default: ``echo``), and
every call but ``pid`` answers ``RESULT_JSON`` when given (else its arguments as text).
``pid`` answers the process id, so a test can tell whether the server was restarted.
With ``LIST_HANGS`` set, ``tools/list`` is never answered; with ``STARTS_FILE``, each start
adds a line to that file; with ``CHATTY``, a line of plain text (a print left in) comes
before each call's answer; with ``LATIN1``, answers are written in Latin-1 (a byte that is
no UTF-8, as a server echoing a Latin-1 file name writes); with ``NEXT_CURSOR``, every
listing names that cursor for a next page (a paging bug), each counted as a line of
``LISTS_FILE`` when given; with ``BAD_INIT``, the handshake's answer lacks its protocol
version.
"""

from __future__ import annotations

import json
import os
import sys

ECHO = {
    "name": "echo",
    "description": "echo",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
}
TOOLS = json.loads(os.environ.get("TOOLS_JSON") or "null") or [ECHO]
RESULT = json.loads(os.environ.get("RESULT_JSON") or "null")
LIST_HANGS = bool(os.environ.get("LIST_HANGS"))
CHATTY = bool(os.environ.get("CHATTY"))
LATIN1 = bool(os.environ.get("LATIN1"))
NEXT_CURSOR = os.environ.get("NEXT_CURSOR")
BAD_INIT = bool(os.environ.get("BAD_INIT"))
if os.environ.get("STARTS_FILE"):
    with open(os.environ["STARTS_FILE"], "a") as starts:
        starts.write(f"{os.getpid()}\n")


def send(message: dict) -> None:
    if LATIN1:
        sys.stdout.buffer.write((json.dumps(message, ensure_ascii=False) + "\n").encode("latin-1"))
    else:
        sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict) -> dict | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {
            **({} if BAD_INIT else {"protocolVersion": params["protocolVersion"]}),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw", "version": "0"},
        }
    if method == "tools/list":
        if os.environ.get("LISTS_FILE"):
            with open(os.environ["LISTS_FILE"], "a") as lists:
                lists.write("list\n")
        return {"tools": TOOLS, **({"nextCursor": NEXT_CURSOR} if NEXT_CURSOR else {})}
    if method == "tools/call":
        if params.get("name") == "pid":
            return {"content": [{"type": "text", "text": str(os.getpid())}]}
        if RESULT is not None:
            return RESULT
        return {"content": [{"type": "text", "text": json.dumps(params.get("arguments") or {})}]}
    if method == "ping":
        return {}
    return None


for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    if "id" not in request:
        continue  # a notification
    if LIST_HANGS and request.get("method") == "tools/list":
        continue
    if CHATTY and request.get("method") == "tools/call":
        sys.stdout.write("handling a call\n")
    result = answer(request)
    if result is None:
        send({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "no"}})
    else:
        send({"jsonrpc": "2.0", "id": request["id"], "result": result})

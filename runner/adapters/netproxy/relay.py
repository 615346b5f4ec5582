"""The in-sandbox end: TCP 127.0.0.1:PORT inside the network namespace -> the proxy's unix socket bound in.

Inside `bwrap --unshare-net` only loopback exists. `relay_argv` wraps the sandboxed command in a few lines of
standard-library Python run by the sandbox's own interpreter: it binds 127.0.0.1:PORT *before* the command
starts (no race: the first request finds the listener), forks, and the parent `exec`s the command (its pid,
stdio and signals stay the command's). The child relays every connection to the unix socket; its stdio is
/dev/null (it holds no pipe of the command's open) and it dies with the command (PR_SET_PDEATHSIG), or at the
latest with the sandbox's PID namespace. It decides nothing: the proxy outside does.

Mirrors: a loopback address the run's allow-list names with its port (`127.0.0.1:5432`, `localhost:3000`: a
database for the gates, a model gateway on the machine) is shown inside at the same port of the sandbox's own
127.0.0.1. The relay listens there too and opens each connection as `CONNECT host:port` through the proxy, so
clients that know no proxy (psql, a redis client, an SDK told NO_PROXY) reach it unchanged, headers and TLS
included, and the proxy's allow-list still decides.
"""

from __future__ import annotations

from collections.abc import Sequence

INSIDE_PORT = 3128
INSIDE_SOCKET = "/run/plan-runner/net.sock"

# Kept to Python 3.7+ and the standard library: it runs under whatever interpreter the sandbox has.
RELAY_SOURCE = r'''
import asyncio, os, signal, socket, sys
port, path, mirrors, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[5:]
def listen(p):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", p))
    sock.listen(128)
    return sock
listeners = [(listen(port), None)]
for spec in filter(None, mirrors.split(",")):
    inside, _, target = spec.partition("=")
    try:
        listeners.append((listen(int(inside)), target))
    except OSError as exc:
        sys.stderr.write("plan-runner relay: cannot show %s inside: %s\n" % (target, exc.strerror))
parent = os.getpid()
if os.fork():
    for sock, _ in listeners:
        sock.close()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("plan-runner relay: cannot run %s: %s\n" % (argv[0], exc.strerror))
        os._exit(127)
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the command
except Exception:
    pass
if os.getppid() != parent:
    os._exit(0)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except Exception:
        writer.close()
async def serve(reader, writer, target=None):
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path, limit=65536)
        if target:
            up_writer.write(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
            head = await up_reader.readuntil(b"\r\n\r\n")
            if head.split(b" ", 2)[1:2] != [b"200"]:
                raise OSError("refused")
    except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        writer.close()
        return
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    up_writer.close()
    writer.close()
async def main():
    servers = [await asyncio.start_server(lambda r, w, t=target: serve(r, w, t), sock=sock, limit=65536)
               for sock, target in listeners]
    await asyncio.gather(*(server.serve_forever() for server in servers))
asyncio.run(main())
'''


def relay_argv(argv: list[str] | tuple[str, ...], *, python: str, socket: str = INSIDE_SOCKET,
               port: int = INSIDE_PORT, mirrors: Sequence[tuple[str, int]] = ()) -> list[str]:
    """`argv` run behind the relay: `python` must be an interpreter visible inside the sandbox (3.7+), `socket`
    the proxy's socket as the sandbox sees it. `mirrors`: loopback (host, port)s shown inside at 127.0.0.1:port
    (a port equal to the relay's own is not: it is the proxy's)."""
    if not argv:
        raise ValueError("relay_argv needs a command")
    shown = ",".join(f"{p}={f'[{h}]' if ':' in h else h}:{p}" for h, p in dict.fromkeys(mirrors) if p != port)
    return [python, "-I", "-S", "-c", RELAY_SOURCE, str(port), socket, shown, "--", *argv]

"""The in-sandbox end: TCP 127.0.0.1:PORT inside the network namespace -> the proxy's unix socket bound in.

Inside `bwrap --unshare-net` only loopback exists. `relay_argv` wraps the sandboxed command in a few lines of
standard-library Python run by the sandbox's own interpreter: it binds 127.0.0.1:PORT *before* the command
starts (no race: the first request finds the listener), forks, and the parent `exec`s the command (its pid,
stdio and signals stay the command's). The child relays every connection to the unix socket; its stdio is
/dev/null (it holds no pipe of the command's open) and it dies with the command (PR_SET_PDEATHSIG), or at the
latest with the sandbox's PID namespace. It decides nothing: the proxy outside does.
"""

from __future__ import annotations

INSIDE_PORT = 3128
INSIDE_SOCKET = "/run/plan-runner/net.sock"

# Kept to Python 3.7+ and the standard library: it runs under whatever interpreter the sandbox has.
RELAY_SOURCE = r'''
import asyncio, os, signal, socket, sys
port, path, argv = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(128)
parent = os.getpid()
if os.fork():
    listener.close()
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
async def serve(reader, writer):
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    up_writer.close()
    writer.close()
async def main():
    server = await asyncio.start_server(serve, sock=listener, limit=65536)
    async with server:
        await server.serve_forever()
asyncio.run(main())
'''


def relay_argv(argv: list[str] | tuple[str, ...], *, python: str, socket: str = INSIDE_SOCKET,
               port: int = INSIDE_PORT) -> list[str]:
    """`argv` run behind the relay: `python` must be an interpreter visible inside the sandbox (3.7+), `socket`
    the proxy's socket as the sandbox sees it."""
    if not argv:
        raise ValueError("relay_argv needs a command")
    return [python, "-I", "-S", "-c", RELAY_SOURCE, str(port), socket, "--", *argv]

"""The Python yardstick: a minimal asyncio Protocol line-echo server on a Unix socket.

    python bench/echo/asyncio_echo.py SOCKET

Each complete request line is written back; the floor for an NDJSON server written
in Python on asyncio, as storyd's transport is (bench/bench_echo.py).
"""

import asyncio
import sys


class Echo(asyncio.Protocol):
    """Write back every complete line received."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.rfind(b"\n") + 1
        if end:
            self.transport.write(self.buffer[:end])  # type: ignore[attr-defined]
            self.buffer = self.buffer[end:]


async def main(path: str) -> None:
    server = await asyncio.get_running_loop().create_unix_server(Echo, path)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))

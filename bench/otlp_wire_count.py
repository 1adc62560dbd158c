# A counting TCP relay for the push benchmarks (bench/otel_ebpf_compare.sh): listens on 127.0.0.1:PORT,
# relays every connection to 127.0.0.1:TARGET and counts the bytes each way. Where a connection speaks
# HTTP/2 (gRPC), it also reads the client's DATA frames and their gRPC messages: how many, their bytes as
# sent (compressed or not) and, for gzip-compressed ones, their size once inflated (the protobuf itself).
# Every second the totals so far go to STATS_FILE as one JSON object (written whole, then renamed).
# Usage: python3 otlp_wire_count.py PORT TARGET STATS_FILE
import asyncio, json, os, struct, sys, zlib

port, target, stats_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
totals = {"connections": 0, "bytes_up": 0, "bytes_down": 0, "grpc_messages": 0,
          "grpc_message_bytes": 0, "grpc_message_bytes_inflated": 0}
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class Http2Reader:
    """Follows the client side of one connection: HTTP/2 frames, then gRPC messages per stream."""

    def __init__(self):
        self.buf = b""
        self.state = "preface"  # "preface", "frames" or "other" (not HTTP/2: bytes counted only)
        self.streams = {}

    def feed(self, data):
        if self.state == "other":
            return
        self.buf += data
        if self.state == "preface":
            if len(self.buf) < len(PREFACE):
                if not PREFACE.startswith(self.buf):
                    self.state = "other"
                return
            if not self.buf.startswith(PREFACE):
                self.state = "other"
                return
            self.buf = self.buf[len(PREFACE):]
            self.state = "frames"
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[0:3], "big")
            if len(self.buf) < 9 + length:
                return
            ftype, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            if ftype != 0:  # DATA frames only
                continue
            if flags & 0x8:  # PADDED: one byte of pad length, then the padding at the end
                pad = payload[0]
                payload = payload[1:len(payload) - pad]
            self.streams[stream] = self.streams.get(stream, b"") + payload
            self.messages(stream)

    def messages(self, stream):
        data = self.streams[stream]
        while len(data) >= 5:
            compressed, n = data[0], struct.unpack(">I", data[1:5])[0]
            if len(data) < 5 + n:
                break
            body = data[5:5 + n]
            data = data[5 + n:]
            totals["grpc_messages"] += 1
            totals["grpc_message_bytes"] += n
            totals["grpc_message_bytes_inflated"] += (
                len(zlib.decompress(body, 16 + zlib.MAX_WBITS)) if compressed else n)
        self.streams[stream] = data


async def pipe(reader, writer, key, http2):
    try:
        while data := await reader.read(65536):
            totals[key] += len(data)
            if http2:
                http2.feed(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def handle(client_reader, client_writer):
    totals["connections"] += 1
    try:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(pipe(client_reader, server_writer, "bytes_up", Http2Reader()),
                         pipe(server_reader, client_writer, "bytes_down", None))


async def write_stats():
    while True:
        with open(stats_file + ".tmp", "w") as f:
            json.dump(totals, f)
        os.replace(stats_file + ".tmp", stats_file)
        await asyncio.sleep(1)


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    asyncio.create_task(write_stats())
    async with server:
        await server.serve_forever()

asyncio.run(main())

"""``python -m bench.desktop_audio``: what a desktop's sound costs and how late it comes.

Starts one deskpool/desktop (``--image``) through the agent's own runtime, logs in to its
published sound port as the node's gateway does (:func:`nodeagent.desktop_audio.open_audio`)
and measures, with a 440 Hz tone written into the container beforehand and played with
``pacat`` (any PulseAudio program plays the same way):

1. latency, median of ``--runs``: from the moment the desktop starts ``pacat`` (its clock,
   written in the container just before) to the first bytes of the tone at the listener;
2. the stream's rate while the tone plays (Opus from the images since issue 34, PCM from
   older ones: run it with ``--image`` of each to compare), as the desktop sends it and as
   the gateway sends it on to one listener (WebSocket frames, headers included), and what
   comes while the desktop is silent;
3. CPU (% of one core) of the desktop's sound processes (PulseAudio, deskpool-audio,
   parec) over ``--sample-s``: silent with nobody listening, then playing to one listener;
4. their resident memory in both cases.

Everything it makes is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import statistics
import sys
import time

from bench.agent import Bench
from nodeagent.desktop_audio import (
    MAX_PACKET_BYTES,
    OPUS,
    PACKET_LENGTH,
    AudioFormat,
    AudioRefused,
    open_audio,
)
from nodeagent.runtime import container_name
from nodeagent.software import DESKTOP_IMAGE

BENCH_SECRET = "bench123"  # bench.agent's sessions' secret
SOUND_PROCESSES = ("pulseaudio", "deskpool-audio", "parec")
TONE_FILE = "/tmp/bench-tone.raw"
TONE_AMPLITUDE = 8000  # of 32768
# Writes {seconds} s of a 440 Hz tone at TONE_AMPLITUDE, 48 kHz, 2 channels, s16le.
MAKE_TONE = (
    "import math, struct; one = b''.join(struct.pack('<hh', *(2 * [int("
    f"{TONE_AMPLITUDE} * math.sin(2 * math.pi * 440 * i / 48000))])) for i in range(48000)); "
    f"open('{TONE_FILE}', 'wb').write(one * {{seconds}})"
)
# Plays it through PulseAudio in the desktop's session, as any program plays, noting when.
PLAY = (
    'export XDG_RUNTIME_DIR="$(readlink /tmp/deskpool-runtime)/xdg"; date +%s.%N > /tmp/t0; '
    f"pacat --format=s16le --rate=48000 --channels=2 {TONE_FILE}"
)
# Per process: name, utime + stime (clock ticks), resident pages.
READ_PROCESSES = (
    "for p in /proc/[0-9]*; do "
    'n=$(tr "\\0" " " < $p/cmdline 2>/dev/null | cut -d" " -f1-2); '
    'echo "$n|$(cut -d" " -f14,15 $p/stat 2>/dev/null)|$(cut -d" " -f2 $p/statm 2>/dev/null)"; '
    "done"
)


def opus_packets(stream: bytes) -> list[bytes]:
    """An Opus stream as the desktop sent it (each packet after its length), in packets."""
    packets, at = [], 0
    while at + PACKET_LENGTH.size <= len(stream):
        (length,) = PACKET_LENGTH.unpack_from(stream, at)
        if not 0 < length <= MAX_PACKET_BYTES or at + 2 + length > len(stream):
            raise AudioRefused(f"not an Opus stream at byte {at}")
        packets.append(stream[at + 2 : at + 2 + length])
        at += 2 + length
    return packets


def decode_opus(packets: list[bytes], channels: int = 2) -> bytes:
    """The packets decoded with this host's libopus (Debian's libopus0) to s16le at 48 kHz."""
    lib = ctypes.CDLL("libopus.so.0")
    lib.opus_decoder_create.restype = ctypes.c_void_p
    lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.opus_decode.restype = ctypes.c_int
    lib.opus_decode.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
    ]
    lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
    error = ctypes.c_int(0)
    decoder = lib.opus_decoder_create(48000, channels, ctypes.byref(error))
    if error.value or not decoder:
        raise OSError(f"opus_decoder_create failed: {error.value}")
    most = 5760  # 120 ms, the longest packet Opus has
    out = (ctypes.c_int16 * (most * channels))()
    pcm = bytearray()
    try:
        for packet in packets:
            samples = lib.opus_decode(decoder, packet, len(packet), out, most, 0)
            if samples < 0:
                raise AudioRefused(f"libopus could not decode a packet: {samples}")
            pcm += bytes(out)[: samples * channels * 2]
    finally:
        lib.opus_decoder_destroy(decoder)
    return bytes(pcm)


def to_browser_bytes(found: AudioFormat, heard: bytes) -> int:
    """What the gateway sends a browser for ``heard`` (the desktop's stream): each Opus packet
    in a WebSocket frame of its own, PCM in frames of 16 KiB; with the frames' headers (2
    bytes up to 125 bytes of payload, 4 up to 64 KiB: a server's frames are not masked)."""
    if found.codec == OPUS:
        return sum(len(p) + (2 if len(p) < 126 else 4) for p in opus_packets(heard))
    chunk = 16384
    return len(heard) + 4 * -(-len(heard) // chunk)


def write_tone(container, seconds: int) -> None:  # type: ignore[no-untyped-def]
    container.exec_run(["python3", "-c", MAKE_TONE.format(seconds=seconds)])


def play_tone(container, seconds: int) -> None:  # type: ignore[no-untyped-def]
    """``seconds`` of the tone, played in the desktop; returns once it has started."""
    write_tone(container, seconds)
    container.exec_run(["bash", "-c", PLAY], detach=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.desktop_audio", description=__doc__)
    parser.add_argument("--image", default=DESKTOP_IMAGE)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--cpus", type=float, default=2.0)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--node", default=f"bench-{os.getpid()}")
    return parser.parse_args(argv)


def sound_processes(container) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """CPU ticks and resident kB of the sound processes, summed."""
    output = container.exec_run(["sh", "-c", READ_PROCESSES]).output.decode(errors="replace")
    ticks = pages = 0
    for line in output.splitlines():
        name, _, rest = line.partition("|")
        cpu, _, resident = rest.partition("|")
        programs = {word.rsplit("/", 1)[-1] for word in name.split()}  # python3 <script>
        if programs & set(SOUND_PROCESSES) and cpu.strip():
            utime, stime = (int(x) for x in cpu.split())
            ticks += utime + stime
            pages += int(resident or 0)
    return ticks, pages * os.sysconf("SC_PAGE_SIZE") // 1024


def cpu_percent(container, seconds: float) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    before, _ = sound_processes(container)
    time.sleep(seconds)
    after, resident_kb = sound_processes(container)
    return 100 * (after - before) / os.sysconf("SC_CLK_TCK") / seconds, resident_kb


async def listen(
    port: int,
    seconds: float,
    during=None,
    secret: str = BENCH_SECRET,  # type: ignore[no-untyped-def]
) -> tuple[AudioFormat, bytes, float]:
    """Log in to a desktop's sound port on this host as the node's gateway does, start
    ``during()`` (in a thread), and collect what comes for ``seconds``. Returns the format,
    the bytes, and when the first of them came (time.time(), or 0 when none did)."""
    reader, writer, found = await open_audio("127.0.0.1", port, secret, 10)
    task = asyncio.ensure_future(asyncio.to_thread(during)) if during else None
    heard, first = b"", 0.0
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            data = await asyncio.wait_for(reader.read(65536), left)
        except TimeoutError:
            break
        if not data:
            break
        first = first or time.time()
        heard += data
    writer.close()
    if task:
        await task
    return found, heard, first


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    try:
        session = bench.session()
        started = bench.runtime.start(session)
        port = started.audio_port
        if port is None:
            raise SystemExit(f"{args.image} serves no sound (no deskpool.audio label)")
        container = bench.client.containers.get(container_name(args.node, session.session_id))
        write_tone(container, 2)
        time.sleep(3)  # the session's programs settle

        def play() -> None:
            container.exec_run(["bash", "-c", PLAY])

        delays, rates, sent = [], [], []
        found = None
        for _ in range(args.runs):
            found, heard, first = asyncio.run(listen(port, 3.0, during=play))
            played_at = float(container.exec_run(["cat", "/tmp/t0"]).output)
            delays.append(1000 * (first - played_at))
            rates.append(len(heard) / 2.0)  # the tone lasts 2 s
            sent.append(to_browser_bytes(found, heard) / 2.0)
        _found, silent, _first = asyncio.run(listen(port, 3.0))
        assert found is not None
        print(
            f"{args.image}: sound on port {port}, {found.codec}, {found.rate} Hz, "
            f"{found.channels} channels"
        )
        print(
            f"  pacat starts -> first bytes at the listener: median {statistics.median(delays):.0f}"
            f" ms, min {min(delays):.0f}, max {max(delays):.0f} (n={len(delays)})"
        )
        print(
            f"  while the tone plays, desktop -> gateway: "
            f"{statistics.median(rates) / 1000:.1f} kB/s"
        )
        print(
            "  while the tone plays, gateway -> one listener (WebSocket frames): "
            f"{statistics.median(sent) / 1000:.1f} kB/s"
        )
        print(f"  3 s of silence: {len(silent)} bytes")

        idle_cpu, idle_kb = cpu_percent(container, args.sample_s)

        async def playing() -> tuple[float, int]:
            reader, writer, _found = await open_audio("127.0.0.1", port, BENCH_SECRET, 10)
            loop = asyncio.get_running_loop()

            async def drain() -> None:
                while await reader.read(65536):
                    pass

            drainer = asyncio.ensure_future(drain())
            container.exec_run(
                ["bash", "-c", f"for i in $(seq {int(args.sample_s) + 2}); do {PLAY}; done"],
                detach=True,
            )
            await asyncio.sleep(1)
            result = await loop.run_in_executor(None, cpu_percent, container, args.sample_s)
            drainer.cancel()
            writer.close()
            return result

        busy_cpu, busy_kb = asyncio.run(playing())
        print(
            f"  sound processes, silent, nobody listening: {idle_cpu:.1f} % of a core, "
            f"{idle_kb / 1024:.1f} MB resident"
        )
        print(
            f"  sound processes, playing to one listener:  {busy_cpu:.1f} % of a core, "
            f"{busy_kb / 1024:.1f} MB resident"
        )
    finally:
        bench.clean_up()
    return 0


if __name__ == "__main__":
    sys.exit(main())

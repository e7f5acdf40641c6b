"""keel's runner for Pulumi Python programs.

keel starts the interpreter with this script; it configures the `pulumi`
SDK to talk to keel's resource monitor (addresses and settings come from
KEEL_* environment variables) and runs the program directory's
`__main__.py` inside the stack, as Pulumi's own language host does.
Exit status: 0 success, 1 the program failed (traceback on stderr),
3 the `pulumi` package cannot be imported.
"""

import asyncio
import concurrent.futures
import os
import runpy
import sys
import traceback


def _internal(filename: str) -> bool:
    """Frames of the SDK, gRPC, asyncio, runpy and this runner."""
    if filename.startswith("<"):
        return True
    parts = filename.replace("\\", "/").split("/")
    return any(p in ("pulumi", "grpc", "asyncio", "concurrent") for p in parts) or (
        parts[-1] == "runpy.py"
    )


def report(e: BaseException) -> None:
    """Prints the exception with only the program's own frames, as
    Pulumi's language host does (an error the engine reported arrives here
    with no user frame: its message alone is printed)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not _internal(f.filename)]
    if frames:
        sys.stderr.write("Traceback (most recent call last):\n")
        sys.stderr.write("".join(traceback.format_list(frames)))
    sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
    sys.stderr.flush()


def main() -> int:
    program = os.environ["KEEL_PROGRAM"]
    try:
        from pulumi.runtime import settings, stack
    except ImportError as e:
        sys.stderr.write(
            f"keel: the Python package `pulumi` cannot be imported by {sys.executable}: {e}\n"
        )
        return 3

    # The config and which keys are secrets, as Pulumi's language host
    # passes them (PULUMI_CONFIG, PULUMI_CONFIG_SECRET_KEYS).
    import pulumi.runtime

    pulumi.runtime.set_all_config(
        pulumi.runtime.get_config_env(), pulumi.runtime.get_config_secret_keys_env()
    )

    root = os.path.dirname(os.path.abspath(program))
    settings.reset_options(
        project=os.environ["KEEL_PROJECT"],
        stack=os.environ["KEEL_STACK"],
        root_directory=root,
        parallel=int(os.environ.get("KEEL_PARALLEL", "16")),
        engine_address=os.environ["KEEL_ENGINE"],
        monitor_address=os.environ["KEEL_MONITOR"],
        preview=os.environ.get("KEEL_PREVIEW") == "1",
        organization=os.environ["KEEL_ORGANIZATION"],
    )
    sys.path.insert(0, root)
    sys.argv = [program]

    def run() -> None:
        runpy.run_path(program, run_name="__main__")

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    # The SDK sends each RPC as a blocking call on the loop's default
    # executor: size it to the registration parallelism keel was given.
    loop.set_default_executor(
        concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, int(os.environ.get("KEEL_PARALLEL", "16")))
        )
    )
    try:
        loop.run_until_complete(stack.run_in_stack(run))
    except BaseException as e:  # noqa: BLE001 - report everything, then fail
        if isinstance(e, SystemExit) and e.code in (None, 0):
            return 0
        report(e)
        return 1
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The lines of nvidia-smi's default table, as data (``docs/formats/nvidia-smi.md``).

What plain ``nvidia-smi`` prints, in the layouts of driver 450 to 610 (the columns widened in
530 and again in 570; older drivers have no ``GI``/``CI`` columns in the process table):

* a time line in the C locale's ``date`` format (``Sun Mar 29 20:25:44 2026``), local time;
* the header box: ``| NVIDIA-SMI 535.247.01   Driver Version: ...   CUDA Version: 12.2 |``
  (R610 of 2026: ``KMD Version: ...   CUDA UMD Version: 13.3``);
* per GPU, a row ``|   4  NVIDIA A100-SXM4-40GB   On  | 00000000:C2:00.0 Off |   0 |`` (index,
  name, persistence mode or the Windows driver model, bus id) and, on the next line, memory used
  and total in the middle cell, ``|  39346MiB / 40960MiB |`` (``Not Supported`` on unified-memory
  GPUs such as GB10);
* the process table: ``|    4   N/A  N/A   3380462   C   VLLM::EngineCore   39336MiB |``
  (GPU, GPU and compute instance, pid, type, name, memory; the name is cut to ``...`` and its last
  characters when long, the memory to ``...`` when it does not fit its column, ``N/A`` under
  Windows' display driver model);
* in MIG mode, the "MIG devices:" box: ``|  0    1   0   0  |  1442MiB / 40192MiB | 42 0 | ...``
  (GPU, GPU instance, compute instance, MIG device, the GPU instance's memory).

Pasted tables are often indented (Markdown) or quoted (a reply's ``> `` marks, nested too), so
leading blanks and quote marks are allowed everywhere (:data:`LEAD`).
"""

from __future__ import annotations

from typing import Final

# What may stand before any line of the table: blanks, and Markdown's quote marks ("> ", "> > ").
LEAD: Final = r"^(?:\s*>)*\s*"

# A time line: what `date` prints in the C locale (nvidia-smi prints it above the table).
TIME: Final = (
    LEAD + r"((?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +"
    r"\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\s*$"
)
TIME_FORMAT: Final = "%a %b %e %H:%M:%S %Y"
HEADER: Final = LEAD + r"\|\s*NVIDIA-SMI \d+\.\d+"
# The GPU row: index, name, persistence mode (or WDDM/TCC on Windows), bus id, display active
# (``N/A`` where the driver cannot tell, as 415 printed for a GeForce GT 640).
GPU_ROW: Final = (
    LEAD + r"\|\s+(?<index>\d+)\s+(?<name>\S.*?)\s+(?:On|Off|WDDM|TCC)\s*\|\s*"
    r"(?<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(?:On|Off|N/A)\s*\|"
)
# The line under a GPU row: memory used and total in the middle cell, or a state. A paste through
# some renderers loses the cell's "/" (``15444MiB  16376MiB``, deepinv/deepinv issue 563): the two
# figures are still used and total.
MEMORY_ROW: Final = (
    LEAD + r"\|[^|]*\|\s*(?:(?<used>\d+)MiB\s*(?:/\s*)?(?<total>\d+)MiB|(?<state>[A-Za-z][^|]*?))"
    r"\s*\|"
)
# A process row: GPU, [GI, CI,] pid, type, name, memory (MiB, N/A, or cut to "...").
PROCESS_ROW: Final = (
    LEAD + r"\|\s+(?<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?<pid>\d+)\s+"
    r"(?<type>C\+G|M\+C|C|G|M)\s+(?<name>\S.*?)\s+(?<memory>\d+MiB|N/A|\S*\.\.\.)\s*\|\s*$"
)
NO_PROCESSES: Final = LEAD + r"\|\s*No running processes found\s*\|\s*$"
# A row of the "MIG devices:" box (MIG mode, drivers 450 on): GPU, GPU instance, compute instance,
# MIG device, then the GPU instance's own memory used / total. Compute instances that share one
# GPU instance leave the memory cell blank after the first; the line under a row holds its BAR1
# use (no device memory), which 450-era layouts leave out.
MIG_ROW: Final = (
    LEAD + r"\|\s+(?<gpu>\d+)\s+(?<gi>\d+)\s+(?<ci>\d+)\s+(?<mig>\d+)\s+\|\s*"
    r"(?:(?<used>\d+)MiB\s*/\s*(?<total>\d+)MiB)?\s*\|"
)
MIG_BAR1: Final = LEAD + r"\|\s+\|\s*\d+MiB\s*/\s*\d+MiB\s*\|"
# Frame, column headings and the rest of the box: the table's structure, no figures.
FRAME: Final = (
    LEAD + r"(?:[+|][-=+| ]*[+|]|\|\s*(?:(?:GPU|Fan|ID)\b|Processes:|MIG devices:).*\||"
    r"\|[\s|]*(?:MIG M\.|Usage|BAR1-Usage|ECC|Disabled|Enabled|N/A|\d+)[\s|]*.*\|)\s*$"
)
# Driver versions have two or three parts (450.51.06, 580.126.09, 535.54.03). R610 (2026) calls
# the driver the kernel-mode driver: "KMD Version: 610.43.02   CUDA UMD Version: 13.3".
SNIFF_TABLE: Final = r"(?m)" + LEAD + r"\|\s*NVIDIA-SMI \d+(?:\.\d+)+\s+(?:Driver|KMD) Version:"
SNIFF_PROCESSES: Final = r"(?m)" + LEAD + r"\|\s+GPU\s+(?:GI\s+CI\s+)?PID\s+Type\s+Process name"
SNIFF_MIG: Final = r"(?m)" + LEAD + r"\|\s*GPU\s+GI\s+CI\s+MIG\s*\|"

"""Repack a wheel without some of its files, keeping it a valid wheel: the dropped files' RECORD
lines are removed and every other member is copied byte for byte (names sorted, timestamps fixed,
so the output is reproducible).

usage: trim_wheel.py IN.whl OUT.whl GLOB [GLOB ...]   (globs match member names, fnmatch rules)
"""

import fnmatch
import sys
import zipfile


def main():
    src, dst, globs = sys.argv[1], sys.argv[2], sys.argv[3:]
    dropped = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        names = sorted(zin.namelist())
        keep = [n for n in names if not any(fnmatch.fnmatch(n, g) for g in globs)]
        dropped = [n for n in names if n not in keep]
        for name in keep:
            data = zin.read(name)
            if name.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(l for l in lines if l.split(",", 1)[0] not in dropped).encode()
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = zin.getinfo(name).external_attr
            info.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(info, data, compresslevel=9)
    for name in dropped:
        print(f"dropped {name}")


if __name__ == "__main__":
    main()

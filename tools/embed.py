#!/usr/bin/env python3
"""Writes a C++ source defining `const char* <symbol>` with a file's text (build-time embed)."""
import sys

src, out, symbol = sys.argv[1:4]
text = open(src, encoding="utf-8").read()
delim = "PFEMBED"
assert f'){delim}"' not in text
with open(out, "w", encoding="utf-8") as f:
    f.write(f'extern const char* const {symbol};\nconst char* const {symbol} = R"{delim}({text}){delim}";\n')

#!/bin/bash
cd /root && rm -rf hybridlm && git clone -q /src hybridlm && cd hybridlm && git log --oneline -1
start=$(printf '%(%s)T' -1)
( time make demo ) 2>&1 | while IFS= read -r line; do printf '%(%s)T +%4ds %s\n' -1 $(( $(printf '%(%s)T' -1) - start )) "$line"; done

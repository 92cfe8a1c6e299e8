#!/bin/bash
mkdir -p /app/confs
tar -xzf /app/bundle.tar.gz -C /app/confs --strip-components=1 --wildcards '*.conf'
find /app/confs -type f | sort

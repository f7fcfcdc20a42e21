#!/bin/bash
# The image's health: /healthz answers 200 while an account can serve,
# 503 otherwise (an empty pool: unhealthy until the first account).
exec 3<>/dev/tcp/127.0.0.1/8787 || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
read -r -t 3 status <&3 || exit 1
case "$status" in
    "HTTP/1.1 200 "*) exit 0 ;;
    *) exit 1 ;;
esac

# Sourced by the benchmark scripts: starts a Qanat server from the release binary $Q
# with its home under $WORK, on 127.0.0.1:$PORT, logged in as the bootstrap admin, and
# creates the project `bench`. Sets SERVER_PID for the caller's cleanup.
qanat_server() {
  export QANAT_HOME=$WORK/qanat-home QANAT_CREDENTIALS=$WORK/credentials.json
  export QANAT_SERVER_BIND=127.0.0.1:$PORT QANAT_LOG_LEVEL=warn QANAT_SERVER_URL=http://127.0.0.1:$PORT
  "$Q" init >/dev/null 2>&1
  "$Q" server >"$WORK/server.out" 2>"$WORK/server.err" &
  SERVER_PID=$!
  for _ in $(seq 100); do grep -q listening "$WORK/server.out" 2>/dev/null && break; sleep 0.1; done
  "$Q" projects create bench >/dev/null
}

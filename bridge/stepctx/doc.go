// Package stepctx owns the channel through which a function process takes
// durable steps: the context endpoint the bridge serves (Server), one
// registration per invocation attempt (Attempt, its bearer token), the
// protocol spoken on it, a Go client (Client, used by the fnbridge
// command) and the Journal interface the endpoint drives. It does not
// implement the Journal (the bridge does, with the invocation's
// restate.Context), start processes, or hand the address and token to a
// worker; stepctxtest has an in-memory Journal for tests.
//
// # Transport
//
// HTTP/1.1 with JSON bodies (or the framed protocol below), on a unix socket (address unix:///abs/path,
// mode 0600) or TCP (tcp://host:port; plaintext, for a trusted network
// between the bridge and a remote runtime). A function process finds it
// through two environment variables, inherited by its children:
//
//	FNBRIDGE_CONTEXT        unix:///run/fnbridge/ctx.sock | tcp://10.0.0.5:9091
//	FNBRIDGE_CONTEXT_TOKEN  the attempt's token
//
// Every request is POST /v1/<operation> with a JSON object body (an empty
// body reads as {}) and the header "Authorization: Bearer <token>". Unknown
// body fields are refused (400), so a misspelt field never passes
// silently. Every answer is a JSON object with Content-Type
// application/json.
//
// # Framed protocol
//
// The same operations, bodies and statuses also travel framed, on one
// persistent connection per attempt, which is what the Python worker and
// the Go client (the fnbridge command) speak: an HTTP/1.1 exchange costs
// header parsing and writing on both ends of every call, and a step is
// two calls. A connection that opens with FramedPreface is framed; any
// other is HTTP, so both share the listener. The client sends, once,
//
//	FNBRIDGE/1 <token>\n
//
// or, for a process started by a step's function whose start went ahead
// (EnvAfter; see Pipelined steps), FNBRIDGE/1 <token> after=<k>\n
// (it may share a write with the first request, as the Python worker
// does), then one request frame at a time, each a 4-byte big-endian length and
// that many bytes: the operation's name (the route without "/v1/"), "\n",
// and the JSON body ("run/start\n{\"name\":\"fetch\"}"). Every request gets
// one answer frame: a 4-byte length, then the status in decimal, "\n"
// and the JSON answer ("200\n{\"execute\":\"run-3f2a9c01-1\"}"). Requests of a
// connection are served in order; an empty token gets 401 on every
// request; a frame longer than the body limit gets 413 and the connection
// goes on. Between requests a client may send the preface again with
// another attempt's token: the connection then speaks for that attempt
// alone, so a worker can keep one connection for its attempts one after
// another (the Python worker does; a client that does not is unaffected).
// No answer follows a preface; a malformed one (a token line over 512
// bytes, without its "\n", or with characters outside base64url) gets
// one 400 answer saying so, and the connection closes. A preface cannot
// be taken for a request: "FNBR" read as a length is over MaxBodyLimit.
// Once the attempt of its token has ended (or when no open attempt has
// it), a connection that gets no new preface within 5 seconds is closed,
// however many requests it sends meanwhile, and an answer it does not
// read is cut then too; so an idle worker holds none, and neither does a
// client with a made-up token. While the attempt is open the connection
// stays, however long the client is silent. A client that closes the
// connection during a wait ends the wait, as an HTTP client that hangs
// up does; the attempt goes on. An HTTP keep-alive connection is closed
// after the same 5 seconds idle.
//
// # Tokens and attempts
//
// Server.Open registers an attempt with a Journal and returns its token:
// 256 bits from crypto/rand, unpadded base64url (or a caller's token of at
// least 128 bits). The token is accepted until Attempt.Close; then it is
// stale, and a process that outlived its attempt (a background child, say)
// changes nothing: Close returns only once no operation of the attempt is
// running, so the Journal sees none after it. Tokens are never reused.
//
// Serve serves at most Config.MaxConns connections at once (by default a
// quarter of the process's descriptor limit, 64 to 4096); one more is
// closed as soon as it is accepted. It keeps its listener through a
// passing shortage (out of file descriptors or buffers), retrying with a
// backoff up to a second, as http.Server does.
//
// # Values
//
// A value (a run's result, a call's input or output) is bytes. A request
// gives one either as "value" (any JSON; journaled byte for byte as sent)
// or as "bytes" (standard base64, for anything). An answer gives results
// as
//
//	{"value": <JSON>}                         the journaled bytes, when they are JSON
//	{"bytes": "<base64>"}                     otherwise (an empty value: "bytes": "")
//	{"failure": {"code": 404, "message": ""}} a terminal failure (code 0 reads as 500)
//
// A request with "as_bytes": true gets every value as "bytes", exactly as
// journaled (the fnbridge command asks for that; a Python client need not).
//
// # Operations
//
// Handles are opaque strings: "run-T-N" for a run being executed,
// "fut-T-N" for a timer or call, T a tag of the invocation (8 hex digits)
// and N counting the attempt's handles, so a replaying attempt mints the
// same handles as the first. A handle is valid in the attempt that minted
// it; one of another invocation is refused (400) rather than read as this
// one's. A future may be awaited any number of times, in any order, long
// after it was created. A framed connection that closes while a run it
// started is open (its process was killed) ends the attempt: the step
// failed retryably, and later calls get 410.
//
//	/v1/run/start      {"name": "fetch"}
//	  → {"recorded": <result>}  replay: do NOT run the closure; return/raise the result
//	  → {"execute": "run-3f2a9c01-1"}    the run command is journaled; run the closure, then:
//	/v1/run/complete   {"handle": "run-3f2a9c01-1", "value": <JSON>} | "bytes": "<b64>"
//	                   | "failure": {"code": 400, "message": "..."}   terminal: journaled
//	                   | "retryable": {"message": "..."}              nothing journaled
//	                   (without "handle", framed only: the run this connection's
//	                   latest run/start executed, if it is executing; else 400)
//	  → {"result": <result>}    the journaled result
//	  → {"attempt_failed": true} after "retryable": the attempt fails and Restate
//	                            retries it; every later request gets 410
//	/v1/sleep          {"millis": 90000, "async": false}
//	  → {"result": {"bytes": ""}}, or with async {"handle": "fut-3f2a9c01-2"}
//	/v1/call           {"service": "S", "handler": "h", "key": "", "idempotency_key": "",
//	                    "headers": {"k": "v"}, "input": <JSON> | "input_bytes": "<b64>",
//	                    "async": false}
//	  → {"result": <result>}, or with async {"handle": "fut-3f2a9c01-3"}
//	/v1/send           {"service", "handler", "key", "idempotency_key", "headers",
//	                    "input" | "input_bytes", "delay_millis": 0}
//	  → {"invocation_id": "inv_..."}
//	/v1/await          {"handles": ["fut-3f2a9c01-2", "fut-3f2a9c01-3"], "mode": "all" | "any"}
//	  all → {"results": [<result>, <result>]}   in request order (settled, not fail-fast)
//	  any → {"index": 1, "handle": "fut-3f2a9c01-3", "result": <result>}
//	/v1/invocation-id  {} → {"invocation_id": "inv_..."}
//	/v1/random         {} → {"float": 0.37, "int": 3332424118245261}  float = int / 2^53
//	/v1/uuid           {} → {"uuid": "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx"}
//
// Keyed services and awakeables (HandlerInfo says which handler the
// attempt runs, WithHandler):
//
//	/v1/state/get        {"name": "count"} → {"found": true, "result": <result>} | {"found": false}
//	/v1/state/keys       {} → {"keys": ["a", "b"]}   sorted
//	/v1/state/set        {"name": "count", "value": <JSON>} | "bytes": "<b64>"  → {}
//	/v1/state/clear      {"name": "count"} → {}
//	/v1/state/clear-all  {} → {}
//	/v1/awakeable        {} → {"id": "sign_1...", "handle": "sign_1..."}  (the id is its own handle for await)
//	/v1/awakeable/resolve {"id": "sign_1...", "value": <JSON>} | "bytes" → {}
//	/v1/awakeable/reject {"id": "sign_1...", "message": "...", "code": 500} → {}  (code optional, 500)
//	/v1/promise/get      {"name": "approval", "async": false} → {"result": <result>}, or with async {"handle": "fut-T-N"}
//	/v1/promise/peek     {"name": "approval"} → {"found": true, "result": <result>} | {"found": false} (unresolved)
//	/v1/promise/resolve  {"name": "approval", "value": <JSON>} | "bytes" → {}
//	/v1/promise/reject   {"name": "approval", "message": "...", "code": 500} → {}  (code optional, 500)
//	/v1/cancel           {"invocation_id": "inv_..."} → {}
//
// State needs a virtual object's or workflow's handler, and writes an
// exclusive one (or a workflow's run); promises need a workflow's handler.
// A call the handler may not make is refused before anything is
// journaled, as a terminal failure of that call alone:
//
//	200 {"failure": {"code": 500, "message": "state set refused: Counter/get is a shared handler ..."}}
//
// An awakeable id or invocation id restate-server would not parse
// (resolve, reject, cancel) fails the same way with code 400, since the
// journaled command would fail every retry of the attempt.
//
// The same answer fails a call whose wait the invocation's cancellation
// interrupted ({"failure": {"code": 409, "message": "cancelled"}}) and a
// second completion of a promise (409): the function gets a terminal
// failure (Python fnbridge.TerminalError, the fnbridge command exits 100)
// and may go on, with compensations for instance. Clients check for a
// top-level "failure" in every 200 answer.
//
// Random numbers and UUIDs come from a generator seeded with
// Journal.RandomSeed, so the n-th draw of every attempt is the same.
// The fields "as_bytes" (run/start, run/complete, sleep, call, await) and
// "async" are optional booleans; missing strings are "".
//
// # Order
//
// The journal is an ordered log replayed in order, so requests of an
// attempt are served strictly one at a time. A request arriving while
// another is served (two threads, a background child) is refused at once
// with 409, never queued: its place in the journal would depend on
// scheduling. The one exception is a request whose client has hung up
// (`timeout 2 fnbridge sleep 60`): it is ending, and a request arriving
// meanwhile waits for it (at most 5 s), since its maker has moved on.
// A wait given up so ends the attempt: it suspends on the wait's futures
// (or, complete meanwhile, fails retryably), since the function went on
// as if the wait were incomplete, which no replay could reproduce.
// While a run's closure executes (between run/start
// "execute" and run/complete), only run/complete and invocation-id are
// accepted; other operations get 409, since a replay skips the closure and
// could not reproduce what it journaled.
//
// # Pipelined steps
//
// An attempt the bridge opened on a journal with nothing to replay is
// fresh (Attempt.Fresh; the runtime gets gRPC metadata
// fnbridge-context-fresh: true with the token, the Python worker
// "fresh": true in its step context frame, the Bash worker " fresh" after
// the token in its request): each of its run/starts
// answers "execute" or refuses. In an attempt that replays, the first
// run/start that executes once the replay is over says so:
// {"execute": "run-3f2a9c01-4", "live": true}; every later one of the
// attempt answers "execute" or refuses. From there (or from the start,
// fresh) a framed client may send run/start,
// run the closure without reading the answer, and send run/complete
// without "handle"; the two answers come in order. When the start's
// answer is not "execute" (a 200 "failure" for the invocation's
// cancellation, 410 for an attempt that ended), it is the step's outcome:
// the completion was refused too (400 or 410) and nothing of the closure
// was journaled. The RunCommand is flushed once the start is read, so it
// may reach Restate while the closure runs, not before; when the
// completion was read with the start (the closure had already run), it
// goes to Restate with the completion's proposal instead, in one write
// (DoneRunStarter), since no step is in flight to show.
//
// A start sent ahead names its number in the attempt, {"name":"fetch",
// "ahead":3}. Its sender reads its answer only after sending its next
// request, so the endpoint may hold that answer (up to 4 KiB) and write
// it with the next one: the client wakes once for the two. A client that
// numbers its starts must therefore never wait for a start's answer
// before sending another request. The sender also sets EnvAfter
// ("<its pid>:3") for the processes the closure starts. Their connections name it in the preface
// (after=3), and the endpoint serves their requests only once it has
// served that start: a child's call, which may reach the endpoint before
// its parent's start does, is then refused as one beside an executing
// step (409) instead of being journaled ahead of the step, where a
// replay would not put it. A start that does not come within 10 seconds
// (its sender's connection broke first) gets the child's requests
// refused with 409. The runtime learns that the endpoint takes numbered
// starts from gRPC metadata fnbridge-context-ordered: true (the Python
// worker "ordered": true in its step context frame); without it (an
// older bridge, which refuses the field) it numbers none.
//
// # Statuses
//
//	200  done (or, with a top-level "failure", the call failed terminally alone)
//	400  malformed request (unknown field, unknown handle, bad value); nothing journaled
//	401  missing or malformed Authorization header
//	403  stale token (its attempt ended) or foreign token (not issued here)
//	404  unknown operation; 405 not POST; 413 body too large
//	409  another request of the attempt is in flight, or a run is executing
//	410  the attempt is over: stop now. {"error": "...", "suspended": true} when
//	     it suspended (Python: raise fnbridge.Suspended, a BaseException; the
//	     fnbridge command exits 75); without "suspended", it failed (a step
//	     failed retryably, or the journal could not go on, e.g. a journal
//	     mismatch). Every later request of the attempt gets the same 410.
//	503  the client went away during a wait
//
// Every non-200 answer is {"error": "<what happened and what to do>"}.
//
// # A Python stdlib client
//
//	import base64, http.client, json, os, socket
//
//	class _UnixConnection(http.client.HTTPConnection):
//	    def __init__(self, path):
//	        super().__init__("localhost")
//	        self._path = path
//	    def connect(self):
//	        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
//	        self.sock.connect(self._path)
//
//	def _connect():
//	    addr = os.environ["FNBRIDGE_CONTEXT"]
//	    if addr.startswith("unix://"):
//	        return _UnixConnection(addr[len("unix://"):])
//	    return http.client.HTTPConnection(addr[len("tcp://"):])
//
//	def _request(op, body):
//	    conn = _connect()  # one per request: simple, and safe after fork
//	    try:
//	        conn.request("POST", "/v1/" + op, json.dumps(body), {
//	            "Authorization": "Bearer " + os.environ["FNBRIDGE_CONTEXT_TOKEN"],
//	            "Content-Type": "application/json"})
//	        resp = conn.getresponse()
//	        answer = json.loads(resp.read())
//	    finally:
//	        conn.close()
//	    if resp.status == 410:
//	        raise Suspended(answer["error"])  # class Suspended(BaseException)
//	    if resp.status != 200:
//	        raise RuntimeError(answer["error"])
//	    return answer
//
//	def _result(r):
//	    if "failure" in r:
//	        raise TerminalError(r["failure"]["message"], r["failure"]["code"])
//	    return r["value"] if "value" in r else base64.b64decode(r["bytes"])
//
//	def run(name, fn):
//	    started = _request("run/start", {"name": name})
//	    if "recorded" in started:
//	        return _result(started["recorded"])
//	    handle = started["execute"]
//	    try:
//	        value = fn()
//	    except TerminalError as e:
//	        _request("run/complete", {"handle": handle,
//	                 "failure": {"code": e.code, "message": str(e)}})
//	        raise
//	    except Exception as e:
//	        _request("run/complete", {"handle": handle, "retryable": {"message": repr(e)}})
//	        raise
//	    return _result(_request("run/complete", {"handle": handle, "value": value})["result"])
//
//	def sleep(seconds):
//	    _result(_request("sleep", {"millis": int(seconds * 1000)})["result"])
package stepctx

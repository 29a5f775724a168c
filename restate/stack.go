package restate

// invocationStack is the stack an invocation's handler goroutine ends up
// needing (our frames plus net/http and HTTP/2 response writing, measured
// with the echo benchmark) with headroom for a modest user handler.
const invocationStack = 16 << 10

// growStack makes the calling goroutine's stack at least invocationStack
// deep while the call chain is still shallow. HTTP/2 runs each request on
// a fresh goroutine with a small stack; left alone it doubles several
// times deep inside the first response flush, and each doubling copies
// and re-scans every frame on the stack. Growing once, early, costs one
// copy of a few frames.
//
//go:noinline
func growStack(i int) byte {
	var pad [invocationStack - 2<<10]byte
	pad[i%len(pad)] = byte(i)
	return pad[(i+1)%len(pad)]
}

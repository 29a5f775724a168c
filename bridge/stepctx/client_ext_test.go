package stepctx_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// TestClientCancelledAsTheAnswerArrives cancels the caller's context at
// the moment the endpoint answers, over and over, so the cancellation
// races the end of the exchange. Whatever wins, the call returns either
// the answer or the context's error, and (under -race) the client's
// interrupt never touches a connection the client is closing: the race
// detector caught exactly that once in CI.
func TestClientCancelledAsTheAnswerArrives(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cancels := make(chan context.CancelFunc, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go answerCancelling(c, cancels)
		}
	}()
	const rounds = 300
	answered, cancelled := 0, 0
	for i := 0; i < rounds; i++ {
		c, err := stepctx.NewClient("tcp://"+l.Addr().String(), "token")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancels <- cancel
		id, err := c.InvocationID(ctx)
		switch {
		case err == nil && id == "inv_1":
			answered++
		case errors.Is(err, context.Canceled):
			cancelled++
		default:
			t.Fatalf("round %d: got %q, %v; want the answer or context.Canceled", i, id, err)
		}
		cancel()
		c.Close()
	}
	t.Logf("%d rounds: %d answered, %d cancelled", rounds, answered, cancelled)
}

// answerCancelling reads the preface and one request frame, then cancels
// the caller's context and answers in the same instant.
func answerCancelling(c net.Conn, cancels <-chan context.CancelFunc) {
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // preface and token
		return
	}
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, r, int64(binary.BigEndian.Uint32(hdr[:]))); err != nil {
		return
	}
	body := "200\n" + `{"invocation_id":"inv_1"}`
	answer := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	answer = append(answer, body...)
	cancel := <-cancels
	go cancel()
	_, _ = c.Write(answer)
	_, _ = io.Copy(io.Discard, r)
}

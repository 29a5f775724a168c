package h2_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/fnbridge/fnbridge/restate/internal/h2"
)

// FuzzServerConn feeds arbitrary bytes after the preface to a connection:
// whatever they are, the server must not panic, and ServeConn must return
// (every handler it started included) once the client has closed.
func FuzzServerConn(f *testing.F) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/invoke/S/h"}, {Name: ":authority", Value: "x"}, {Name: "content-length", Value: "4"}} {
		_ = enc.WriteField(hf)
	}
	block := hb.Bytes()
	frames := func(write func(fr *http2.Framer)) []byte {
		var b bytes.Buffer
		write(http2.NewFramer(&b, nil))
		return b.Bytes()
	}
	f.Add(frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true})
		_ = fr.WriteData(1, true, []byte("body"))
	}))
	f.Add(frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndHeaders: true})
		_ = fr.WriteWindowUpdate(3, 1)
		_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = fr.WriteData(3, false, []byte("late"))
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 5})
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	}))
	f.Add(frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:3]})
		_ = fr.WriteContinuation(1, true, block[3:])
		_ = fr.WriteData(1, false, []byte("bo"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true, EndStream: true})
	}))
	f.Add(frames(func(fr *http2.Framer) {
		// A malformed request (trailers without END_STREAM) beside a
		// good one, under a zero stream window.
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndHeaders: true})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: nil, EndHeaders: true})
		_ = fr.WriteData(1, true, []byte("body"))
		_ = fr.WriteWindowUpdate(1, 4)
	}))
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		srv := &h2.Server{}
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(w, r.Body)
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(server, handler)
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write(data)
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("ServeConn did not return 10 s after the client closed")
		}
	})
}

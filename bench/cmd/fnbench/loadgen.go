package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// loadResult is one load-generator run.
type loadResult struct {
	OK, Errors int
	FirstError string
	Duration   time.Duration
	Latencies  []time.Duration // of successful requests, sorted
}

func (r loadResult) rps() float64 { return float64(r.OK) / r.Duration.Seconds() }

// newIngressClient is the load generator's connection pool: HTTP/1.1 with
// keep-alive, exactly one connection per concurrent caller, so what is
// measured is the server and the deployment, not connection setup.
func newIngressClient(concurrency int) *http.Client {
	var p http.Protocols
	p.SetHTTP1(true)
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			Protocols:           &p,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        concurrency,
			MaxIdleConnsPerHost: concurrency,
			MaxConnsPerHost:     concurrency,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
	}
}

// load sends POST url with a JSON body {"n":i} from concurrency callers in
// a closed loop until maxRequests were sent or duration passed, whichever
// comes first. A request counts as OK when the answer is 200 and, when
// want is set, its body is want(request body) (JSON, compared compacted).
func load(ctx context.Context, client *http.Client, url string, concurrency, maxRequests int, duration time.Duration, want func(sent []byte) []byte) loadResult {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var (
		next    atomic.Int64
		mu      sync.Mutex
		res     loadResult
		perWork = make([][]time.Duration, concurrency)
		wg      sync.WaitGroup
	)
	begin := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(maxRequests) {
					break
				}
				body := []byte(`{"n":` + strconv.FormatInt(i, 10) + `}`)
				t0 := time.Now()
				err := callOnce(ctx, client, url, body, want)
				d := time.Since(t0)
				if err != nil {
					if ctx.Err() != nil {
						break // cut off by the time bound: not an error
					}
					mu.Lock()
					res.Errors++
					if res.FirstError == "" {
						res.FirstError = err.Error()
					}
					mu.Unlock()
					continue
				}
				lat = append(lat, d)
			}
			perWork[w] = lat
		}()
	}
	wg.Wait()
	res.Duration = time.Since(begin)
	for _, l := range perWork {
		res.Latencies = append(res.Latencies, l...)
	}
	slices.Sort(res.Latencies)
	res.OK = len(res.Latencies)
	return res
}

func callOnce(ctx context.Context, client *http.Client, url string, body []byte, want func(sent []byte) []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, got)
	}
	if want != nil {
		if w := want(body); !sameJSON(got, w) {
			return fmt.Errorf("wrong answer: sent %s, want %s, got %.200s", body, w, got)
		}
	}
	return nil
}

// sameJSON compares two JSON documents ignoring insignificant whitespace.
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

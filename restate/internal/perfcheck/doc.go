// Command perfcheck measures the Restate endpoint's CPU per invocation
// against the sdk-go reference peer (bench/sdkgo), side by side in one run.
//
// Each endpoint runs as its own child process so its CPU (utime+stime from
// /proc/PID/stat, read before and after a load point) excludes the driver.
// Load points are interleaved (ours, sdk-go, ours, sdk-go, ...) so both
// peers see the same background load on a shared machine; the report is
// the median of the repetitions.
//
//	cd bench/sdkgo && go build -o /tmp/sdkgo-echo .
//	go run ./restate/internal/perfcheck -sdkgo /tmp/sdkgo-echo [-baseline OLD]
//
// With -cpuprofile/-memprofile only our endpoint is driven (at the first
// concurrency and version) and the profiles are written by the child.
//
// "perfcheck serve" is the child mode: our endpoint with the same echo
// workload as the peer (one Run returning the input).
package main

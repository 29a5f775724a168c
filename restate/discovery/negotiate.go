package discovery

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Supported manifest versions.
const (
	MinVersion = 1
	MaxVersion = 4
)

// ErrNotAcceptable is wrapped by every error of [Negotiate]: the endpoint
// answers such a discovery request with 415 Unsupported Media Type and the
// error text as body.
var ErrNotAcceptable = errors.New("discovery: not acceptable")

const (
	mediaTypePrefix = "application/vnd.restate.endpointmanifest.v"
	mediaTypeSuffix = "+json"
)

// ContentType is the media type of manifest version v, sent back as the
// response's content-type ("application/vnd.restate.endpointmanifest.vN+json").
// Pass a version [Negotiate] returned.
func ContentType(version int) string {
	return mediaTypePrefix + strconv.Itoa(version) + mediaTypeSuffix
}

// Negotiate picks the manifest version to answer a discovery request with,
// from its Accept header: the highest of v1..v4 among the listed
// endpointmanifest media types. The header is a comma-separated list; each
// element may carry parameters after ";" and surrounding whitespace, media
// types compare case-insensitively, and an element with q=0 is refused
// rather than accepted. "*/*" and "application/*" accept the newest version.
//
// Errors (all wrapping [ErrNotAcceptable]): a missing or blank Accept header
// (every restate-server release sends one, so its absence is not a runtime
// we can serve safely), a malformed element or q-value, and a list naming no
// supported version.
func Negotiate(accept string) (int, error) {
	if strings.TrimSpace(accept) == "" {
		return 0, fmt.Errorf("%w: missing Accept header; expected one of %s", ErrNotAcceptable, supportedList())
	}
	best := 0
	for i, elem := range strings.Split(accept, ",") {
		elem = strings.TrimSpace(elem)
		if elem == "" {
			continue // empty list elements are allowed by RFC 9110 §5.6.1
		}
		version, err := parseElement(elem)
		if err != nil {
			return 0, fmt.Errorf("%w: Accept element %d %q: %v", ErrNotAcceptable, i+1, elem, err)
		}
		if version > best {
			best = version
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("%w: Accept %q lists no supported endpoint manifest version; expected one of %s",
			ErrNotAcceptable, accept, supportedList())
	}
	return best, nil
}

// parseElement returns the supported version one Accept element selects, 0
// when it selects none.
func parseElement(elem string) (int, error) {
	mediaType, params, _ := strings.Cut(elem, ";")
	mediaType = strings.ToLower(strings.TrimSpace(mediaType))
	if mediaType == "" || !strings.Contains(mediaType, "/") {
		return 0, errors.New("not a media type")
	}
	for p := range strings.SplitSeq(params, ";") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		name, value, ok := strings.Cut(p, "=")
		if !ok {
			return 0, fmt.Errorf("parameter %q has no value", p)
		}
		if !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || q < 0 || q > 1 {
			return 0, fmt.Errorf("q-value %q is not a number in [0, 1]", value)
		}
		if q == 0 {
			return 0, nil // "not acceptable" (RFC 9110 §12.4.2)
		}
	}
	switch mediaType {
	case "*/*", "application/*":
		return MaxVersion, nil
	}
	rest, ok := strings.CutPrefix(mediaType, mediaTypePrefix)
	if !ok {
		return 0, nil
	}
	digits, ok := strings.CutSuffix(rest, mediaTypeSuffix)
	if !ok {
		return 0, nil
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, nil
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v < MinVersion || v > MaxVersion {
		return 0, nil // a version we do not know (e.g. a future v5) is skipped
	}
	return v, nil
}

func supportedList() string {
	names := make([]string, 0, MaxVersion-MinVersion+1)
	for v := MaxVersion; v >= MinVersion; v-- {
		names = append(names, ContentType(v))
	}
	return strings.Join(names, ", ")
}

package discovery

import (
	"errors"
	"fmt"
	"math"
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
// from its Accept header: the highest of v1..v4 that the header accepts.
// The header is a comma-separated list; each element may carry parameters
// after ";" and surrounding whitespace, and media types compare
// case-insensitively. A version is accepted by the most specific media
// range that names it (RFC 9110 §12.5.1): its own endpointmanifest media
// type, else "application/*", else "*/*"; a q-value of 0 there refuses it
// (RFC 9110 §12.4.2), and other q-values do not rank the versions.
// Elements of other media types are skipped, even when they do not parse:
// they are not ours to judge.
//
// Errors (all wrapping [ErrNotAcceptable]): a missing or blank Accept header
// (every restate-server release sends one, so its absence is not a runtime
// we can serve safely), a malformed endpointmanifest or wildcard element
// (a bad parameter or q-value), and a list accepting no supported version.
func Negotiate(accept string) (int, error) {
	if strings.TrimSpace(accept) == "" {
		return 0, fmt.Errorf("%w: missing Accept header; expected one of %s", ErrNotAcceptable, supportedList())
	}
	// The q-value each media range gives, -1 where the list has none
	// (several elements for one range: the highest).
	var exact [MaxVersion + 1]float64
	for v := range exact {
		exact[v] = -1
	}
	application, anyType := -1.0, -1.0
	var skipped []string
	for i, elem := range strings.Split(accept, ",") {
		elem = strings.TrimSpace(elem)
		if elem == "" {
			continue // empty list elements are allowed by RFC 9110 §5.6.1
		}
		r, err := parseElement(elem)
		if err != nil {
			if r.kind == otherRange {
				skipped = append(skipped, fmt.Sprintf("element %d %q: %v", i+1, elem, err))
				continue
			}
			return 0, fmt.Errorf("%w: Accept element %d %q: %v", ErrNotAcceptable, i+1, elem, err)
		}
		switch r.kind {
		case versionRange:
			exact[r.version] = max(exact[r.version], r.q)
		case applicationRange:
			application = max(application, r.q)
		case anyRange:
			anyType = max(anyType, r.q)
		}
	}
	for v := MaxVersion; v >= MinVersion; v-- {
		q := exact[v]
		if q < 0 {
			q = application
		}
		if q < 0 {
			q = anyType
		}
		if q > 0 {
			return v, nil
		}
	}
	note := ""
	if len(skipped) > 0 {
		note = " (skipped " + strings.Join(skipped, "; ") + ")"
	}
	return 0, fmt.Errorf("%w: Accept %q lists no supported endpoint manifest version%s; expected one of %s",
		ErrNotAcceptable, accept, note, supportedList())
}

// rangeKind is what a media range of an Accept element selects.
type rangeKind uint8

const (
	otherRange       rangeKind = iota // not a supported version
	versionRange                      // one supported version
	applicationRange                  // application/*
	anyRange                          // */*
)

// mediaRange is one parsed Accept element.
type mediaRange struct {
	kind    rangeKind
	version int     // versionRange's
	q       float64 // 1 unless given
}

// parseElement parses one Accept element. An error comes with the kind of
// range the element names, when its media type could be read.
func parseElement(elem string) (mediaRange, error) {
	r := mediaRange{q: 1}
	mediaType, params, _ := strings.Cut(elem, ";")
	mediaType = strings.ToLower(strings.TrimSpace(mediaType))
	if mediaType == "" || !strings.Contains(mediaType, "/") {
		return r, errors.New("not a media type")
	}
	r.kind, r.version = classify(mediaType)
	for p := range strings.SplitSeq(params, ";") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		name, value, ok := strings.Cut(p, "=")
		if !ok {
			return r, fmt.Errorf("parameter %q has no value", p)
		}
		if !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || math.IsNaN(q) || q < 0 || q > 1 {
			return r, fmt.Errorf("q-value %q is not a number in [0, 1]", value)
		}
		r.q = q
	}
	return r, nil
}

// classify says which range a lower-case media type is.
func classify(mediaType string) (rangeKind, int) {
	switch mediaType {
	case "*/*":
		return anyRange, 0
	case "application/*":
		return applicationRange, 0
	}
	rest, ok := strings.CutPrefix(mediaType, mediaTypePrefix)
	if !ok {
		return otherRange, 0
	}
	digits, ok := strings.CutSuffix(rest, mediaTypeSuffix)
	if !ok {
		return otherRange, 0
	}
	if digits == "" || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return otherRange, 0 // only the canonical decimal names a version: not v04, v+4
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v < MinVersion || v > MaxVersion {
		return otherRange, 0 // a version we do not know (e.g. a future v5) is skipped
	}
	return versionRange, v
}

func supportedList() string {
	names := make([]string, 0, MaxVersion-MinVersion+1)
	for v := MaxVersion; v >= MinVersion; v-- {
		names = append(names, ContentType(v))
	}
	return strings.Join(names, ", ")
}

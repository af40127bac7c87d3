// Package awsapi is what relay's AWS destination kinds (sqs, eventbridge)
// share: the configuration fields that reach an AWS service (region,
// static credentials, custom endpoint) and their checks, and a publisher's
// part that does not depend on the service: the SDK configuration signing
// with the destination's static keys, the HTTP client the SDK sends
// through, the retryer, and the classification of the SDK's errors into
// relay's answers.
//
// Each kind keeps its own fields, checks, requests and error codes.
package awsapi

import (
	"net/url"
	"regexp"
	"strings"
	"unicode"

	"github.com/relaydev/relay/kind"
)

// The names of the configuration fields every AWS kind has.
const (
	FieldRegion          = "region"
	FieldAccessKeyID     = "access_key_id"
	FieldSecretAccessKey = "secret_access_key"
	FieldSessionToken    = "session_token"
	FieldEndpoint        = "endpoint"
)

// regionRE is an AWS region's shape (us-east-1, us-gov-west-1, cn-north-1,
// eu-central-2...).
var regionRE = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)

// FieldHelp is the help of the shared fields whose words depend on the
// kind: what the region is of, what the identity must be allowed, and
// what may stand in for AWS at a custom endpoint.
type FieldHelp struct {
	Region      string
	AccessKeyID string
	Endpoint    string
}

// Fields describe the shared fields, in the order a kind lists them:
// region, access_key_id, secret_access_key, session_token and endpoint.
// The access key ID and the secret are required; the secret and the
// session token are sensitive.
func Fields(h FieldHelp) []kind.Field {
	return []kind.Field{
		{Name: FieldRegion, Label: "Region", Type: kind.String, Help: h.Region},
		{Name: FieldAccessKeyID, Label: "Access key ID", Type: kind.String, Required: true, Help: h.AccessKeyID},
		{Name: FieldSecretAccessKey, Label: "Secret access key", Type: kind.String, Required: true, Sensitive: true,
			Help: "the secret access key of that access key ID"},
		{Name: FieldSessionToken, Label: "Session token", Type: kind.String, Sensitive: true,
			Help: "the session token, for temporary credentials only"},
		{Name: FieldEndpoint, Label: "Endpoint", Type: kind.String, Help: h.Endpoint},
	}
}

// IsRegion reports whether s has an AWS region's shape, such as us-east-1.
func IsRegion(s string) bool { return regionRE.MatchString(s) }

// CheckRegion checks a region field's value: empty, or a region's shape.
func CheckRegion(r string) error {
	if r != "" && !IsRegion(r) {
		return kind.Errorf(FieldRegion, "%q is not an AWS region such as us-east-1", r)
	}
	return nil
}

// CheckEndpoint checks a custom endpoint: empty, or an http(s) base URL
// with no user, query or fragment.
func CheckEndpoint(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return kind.Errorf(FieldEndpoint, "%q is not an http(s) URL such as http://localhost:4566", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return kind.Errorf(FieldEndpoint, "must have no user, query or fragment")
	}
	return nil
}

// CheckCredentials checks that the access key ID, the secret and the
// session token of c have no white space: a value pasted with its
// surroundings would only be refused by AWS, later.
func CheckCredentials(c kind.Config) error {
	for _, f := range []string{FieldAccessKeyID, FieldSecretAccessKey, FieldSessionToken} {
		if strings.ContainsFunc(c[f], unicode.IsSpace) {
			return kind.Errorf(f, "has a space in it: paste the value alone")
		}
	}
	return nil
}

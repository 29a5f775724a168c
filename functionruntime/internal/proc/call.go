package proc

import (
	"context"

	"github.com/rs/zerolog"
)

// Call is [Supervisor.Do] for an adapter's session type S and a call that
// returns a value; the value is R's zero when Do fails.
func Call[S Session, R any](ctx context.Context, sup *Supervisor, logger *zerolog.Logger, call func(S) (R, error)) (R, error) {
	var res R
	err := sup.Do(ctx, logger, func(s Session) error {
		var err error
		res, err = call(s.(S))
		return err
	})
	if err != nil {
		var zero R
		return zero, err
	}
	return res, nil
}

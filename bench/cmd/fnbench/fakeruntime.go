package main

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// echoRuntime is peer F's FunctionRuntime: every registration is READY at
// once and every invocation returns its input, in process and without
// copying, so what F costs is the bridge alone (Restate endpoint, journal,
// pool, record encoding, logging).
type echoRuntime struct {
	regs atomic.Int64
	// delay holds each answer back (fake-serve --run-delay), standing in
	// for a worker's round trip: how restate-server's cost per request
	// depends on the time between the RunCommand and the proposal.
	delay time.Duration
}

var _ executorv1.FunctionRuntimeClient = (*echoRuntime)(nil)

func (e *echoRuntime) RegisterFunction(_ context.Context, in *executorv1.RegisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.RegisterFunctionResponse, error) {
	id := "reg_echo_" + strconv.FormatInt(e.regs.Add(1), 10)
	return &executorv1.RegisterFunctionResponse{
		Registration: &executorv1.FunctionRegistration{RunUid: in.GetRunUid(), RegistrationId: id},
		State:        executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
	}, nil
}

func (e *echoRuntime) FunctionStatus(_ context.Context, in *executorv1.FunctionStatusRequest, _ ...grpc.CallOption) (*executorv1.FunctionStatusResponse, error) {
	// Always just active, so the pool's idle janitor never unregisters.
	return &executorv1.FunctionStatusResponse{
		Registration:         in.GetRegistration(),
		State:                executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
		LastActivityUnixNano: time.Now().UnixNano(),
	}, nil
}

func (e *echoRuntime) InvokeFunction(_ context.Context, in *executorv1.InvokeFunctionRequest, _ ...grpc.CallOption) (*executorv1.InvokeFunctionResponse, error) {
	if e.delay > 0 {
		time.Sleep(e.delay)
	}
	ct := in.GetContentType()
	if ct == "" {
		ct = "application/json"
	}
	return &executorv1.InvokeFunctionResponse{
		Registration: in.GetRegistration(),
		InvocationId: in.GetInvocationId(),
		Output:       in.GetInput(),
		ContentType:  ct,
	}, nil
}

func (e *echoRuntime) UnregisterFunction(_ context.Context, in *executorv1.UnregisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.UnregisterFunctionResponse, error) {
	return &executorv1.UnregisterFunctionResponse{Registration: in.GetRegistration()}, nil
}

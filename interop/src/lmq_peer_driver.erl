%% Test driver: a hidden Erlang node that runs calls for a test over a pipe.
%%
%%   erl -name drv@127.0.0.1 -hidden -setcookie C -pa interop/ebin \
%%       -noshell -s lmq_peer_driver main
%%
%% Each request on stdin is an Erlang term ended by a full stop:
%%   {Id, Node, Module, Function, Args}.
%% It runs as rpc:call(Node, Module, Function, Args) in a process of its own,
%% or as a local apply when Node is the atom '$local'; requests therefore
%% overlap (a long pull does not hold up a push). Each answer is one line of
%% JSON, in completion order:
%%   {"id": Id, "result": Term}
%% Terms are mapped so Python can rebuild them without ambiguity: integers and
%% floats as numbers, atoms as strings, lists as arrays, tuples as
%% {"t": [...]}, binaries as {"b": base64}, maps as {"m": [[K, V], ...]},
%% anything else (pids, refs, funs) as {"x": printed}. The node halts when
%% stdin closes.
-module(lmq_peer_driver).

-export([main/0, wait_ready/2, listen/0, heard/0, json/1]).

-define(CALL_TIMEOUT, 120000).

%% For `-s`: the loop runs in its own process so that boot completes.
main() ->
    _ = spawn(fun loop/0),
    ok.

loop() ->
    case io:read(standard_io, '') of
        {ok, {Id, Node, Module, Function, Args}} when is_list(Args) ->
            _ = spawn(fun() -> answer(Id, run(Node, Module, Function, Args)) end),
            loop();
        {ok, Other} ->
            answer(null, {error, {bad_request, Other}}),
            loop();
        {error, Reason} ->
            answer(null, {error, {unreadable, Reason}}),
            loop();
        Eof when Eof =:= eof; element(1, Eof) =:= eof ->
            erlang:halt(0)
    end.

run('$local', Module, Function, Args) ->
    try apply(Module, Function, Args)
    catch Class:Reason -> {'EXIT', {Class, Reason}}
    end;
run(Node, Module, Function, Args) ->
    rpc:call(Node, Module, Function, Args, ?CALL_TIMEOUT).

answer(Id, Result) ->
    Line = ["{\"id\":", json(Id), ",\"result\":", json(Result), "}\n"],
    io:put_chars(standard_io, unicode:characters_to_binary(Line)).

%% Polls Node until its peer services run; true, or false after TimeoutMs.
wait_ready(Node, TimeoutMs) ->
    Deadline = erlang:monotonic_time(millisecond) + TimeoutMs,
    poll_ready(Node, Deadline).

poll_ready(Node, Deadline) ->
    case net_adm:ping(Node) =:= pong andalso
         rpc:call(Node, lmq_peer, ready, [], 5000) =:= true of
        true -> true;
        false ->
            case erlang:monotonic_time(millisecond) >= Deadline of
                true -> false;
                false -> timer:sleep(50), poll_ready(Node, Deadline)
            end
    end.

%% Registers a process named lmq_event on the driver node that keeps every
%% message it gets, so a test can see what an LMQ node broadcasts to a member
%% without Mnesia (as a pylmq node would receive it: {notify, {remote, E}}).
listen() ->
    case whereis(lmq_event) of
        undefined ->
            Pid = spawn(fun() -> record([]) end),
            true = register(lmq_event, Pid),
            ok;
        _ ->
            ok
    end.

%% The messages the listener got, oldest first.
heard() ->
    lmq_event ! {heard, self()},
    receive {lmq_event_heard, Messages} -> Messages after 5000 -> {error, timeout} end.

record(Messages) ->
    receive
        {heard, From} ->
            From ! {lmq_event_heard, lists:reverse(Messages)},
            record(Messages);
        Message ->
            record([Message | Messages])
    end.

%% ------------------------------------------------------------------
%% Term to JSON (see the module comment for the mapping)
%% ------------------------------------------------------------------

json(T) when is_integer(T) -> integer_to_list(T);
json(T) when is_float(T) -> float_to_list(T, [short]);
json(T) when is_atom(T) -> json_string(atom_to_list(T));
json(T) when is_binary(T) -> ["{\"b\":\"", base64:encode(T), "\"}"];
json(T) when is_tuple(T) -> ["{\"t\":", json(tuple_to_list(T)), "}"];
json(T) when is_map(T) ->
    ["{\"m\":", json([[K, V] || {K, V} <- lists:sort(maps:to_list(T))]), "}"];
json(T) when is_list(T) ->
    try lists:map(fun json/1, T) of
        Items -> ["[", lists:join(",", Items), "]"]
    catch error:function_clause ->
        %% improper list
        ["{\"x\":", json_string(io_lib:format("~0p", [T])), "}"]
    end;
json(T) ->
    ["{\"x\":", json_string(io_lib:format("~0p", [T])), "}"].

json_string(Chars) ->
    [$", [escape(C) || C <- unicode:characters_to_list(Chars)], $"].

escape($") -> "\\\"";
escape($\\) -> "\\\\";
escape(C) when C < 32 -> io_lib:format("\\u~4.16.0b", [C]);
escape(C) -> C.

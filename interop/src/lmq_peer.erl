%% The interop test peer: an Erlang node that holds LMQ's Mnesia tables and
%% exports LMQ's cluster contract (lmq_lib, lmq_event, lmq_console), plus a
%% driver API that pushes, pulls and acks as an Erlang LMQ node would.
%%
%% Start one with
%%   erl -name pA@127.0.0.1 -setcookie C -pa interop/ebin -noshell -s lmq_peer start
%% and optionally `-lmq_peer_max_life Seconds` so a peer that its test lost
%% track of halts by itself. See interop/README.md.
%%
%% In place of LMQ's queue processes, a puller waits in its own process: it
%% joins the pg group of its queue (scope lmq_peer_waiters), tries to dequeue,
%% and sleeps until woken (lmq_event's new_message / queue_deleted, local or
%% remote) or until the first record of the queue falls due.
-module(lmq_peer).
-behaviour(supervisor).

-include("lmq_peer.hrl").

%% Node life
-export([start/0, start_services/0, stop_services/0, ready/0,
         join/1, leave/0, wake/1]).
%% Driver API
-export([push/2, push/3, pull/1, pull/2, ack/2, nack/2, ext/2, put_back/2,
         delete/1, props/1, update_props/1, update_props/2,
         set_default_props/1, get_default_props/0,
         status/0, event_nodes/0, received/0,
         uuid_text/1, uuid_from_text/1]).
%% supervisor callback
-export([init/1]).

-define(SUP, lmq_peer_sup).
-define(WAITERS, lmq_peer_waiters).
-define(TABLE_TIMEOUT, 30000).

%% ------------------------------------------------------------------
%% Node life
%% ------------------------------------------------------------------

%% Starts Mnesia with a RAM schema (nothing touches the disk), creates the
%% admin tables and starts lmq_event. For `-s lmq_peer start`.
start() ->
    halt_after(init:get_argument(lmq_peer_max_life)),
    ok = application:load(mnesia),
    ok = application:set_env(mnesia, schema_location, ram),
    ok = mnesia:start(),
    start_services().

start_services() ->
    ok = lmq_lib:init_mnesia(),
    ok = mnesia:wait_for_tables(mnesia:system_info(local_tables), ?TABLE_TIMEOUT),
    {ok, Pid} = supervisor:start_link({local, ?SUP}, ?MODULE, []),
    %% The caller may be a short-lived rpc process; the services outlive it.
    true = unlink(Pid),
    ok.

stop_services() ->
    case whereis(?SUP) of
        undefined -> ok;
        Pid -> gen_server:stop(Pid)
    end.

ready() ->
    whereis(?SUP) =/= undefined andalso whereis(lmq_event) =/= undefined.

join(Node) -> lmq_console:join(Node).

leave() -> lmq_console:leave().

%% Wakes this node's pullers of queue Name so they look again.
wake(Name) ->
    [Pid ! {lmq_peer_wake, Name} || Pid <- pg:get_local_members(?WAITERS, Name)],
    ok.

init([]) ->
    Children = [#{id => ?WAITERS, start => {pg, start_link, [?WAITERS]}},
                #{id => lmq_event, start => {lmq_event, start_link, []}}],
    {ok, {#{strategy => one_for_all, intensity => 5, period => 10}, Children}}.

halt_after({ok, [[Seconds]]}) ->
    Ms = list_to_integer(Seconds) * 1000,
    _ = spawn(fun() -> receive after Ms -> erlang:halt(3) end end),
    ok;
halt_after(_) ->
    ok.

%% ------------------------------------------------------------------
%% Driver API: what an Erlang LMQ node does for its clients
%% ------------------------------------------------------------------

%% Queues are created on first use. Body is a binary; Metadata a list of
%% {Header, Value} binaries. Returns ok | {accum, new} | {accum, yes}.
push(Queue, Body) ->
    push(Queue, [], Body).

push(Queue, Metadata, Body) ->
    Name = ensure_queue(Queue),
    Result = lmq_lib:enqueue(Name, {Metadata, Body}, lmq_lib:get_properties(Name)),
    ok = lmq_event:new_message(Name),
    Result.

%% Waits up to Timeout seconds (a number, 0 to look once, or infinity) for a
%% message. Returns the #message{} record (its id holds the uuid to ack) or
%% empty; {error, no_queue_exists} if the queue is deleted meanwhile.
pull(Queue) ->
    pull(Queue, infinity).

pull(Queue, Timeout) ->
    Name = ensure_queue(Queue),
    Deadline = case Timeout of
        infinity -> infinity;
        _ -> erlang:monotonic_time(millisecond) + round(Timeout * 1000)
    end,
    %% Join before the first look so no wake-up between look and sleep is lost.
    ok = pg:join(?WAITERS, Name, self()),
    try
        wait_message(Name, Deadline)
    after
        pg:leave(?WAITERS, Name, self()),
        flush_wakes(Name)
    end.

wait_message(Name, Deadline) ->
    Timeout = proplists:get_value(timeout, lmq_lib:get_properties(Name)),
    case lmq_lib:dequeue(Name, Timeout) of
        empty ->
            case sleep_time(Name, Deadline) of
                expired -> empty;
                Sleep ->
                    receive {lmq_peer_wake, Name} -> ok after Sleep -> ok end,
                    wait_message(Name, Deadline)
            end;
        Result ->
            Result
    end.

%% Until the puller's deadline or the queue's first record falls due,
%% whichever comes first.
sleep_time(Name, Deadline) ->
    Now = erlang:monotonic_time(millisecond),
    case Deadline of
        infinity -> until_due(Name, infinity);
        _ when Deadline =< Now -> expired;
        _ -> until_due(Name, Deadline - Now)
    end.

until_due(Name, Left) ->
    case lmq_lib:waittime(Name) of
        Due when is_integer(Due), Left =:= infinity -> max(1, Due);
        Due when is_integer(Due) -> max(1, min(Left, Due));
        _ -> Left
    end.

flush_wakes(Name) ->
    receive {lmq_peer_wake, Name} -> flush_wakes(Name) after 0 -> ok end.

%% ack / nack / ext / put_back by uuid (16 bytes or its 36-character text).
%% Return lmq_lib's shapes: ok | not_found | {error, no_queue_exists}.
ack(Queue, Uuid) -> lmq_lib:done(name(Queue), uuid(Uuid)).

nack(Queue, Uuid) -> lmq_lib:release(name(Queue), uuid(Uuid)).

ext(Queue, Uuid) ->
    Name = name(Queue),
    Timeout = proplists:get_value(timeout, lmq_lib:get_properties(Name)),
    lmq_lib:retain(Name, uuid(Uuid), Timeout).

put_back(Queue, Uuid) -> lmq_lib:put_back(name(Queue), uuid(Uuid)).

delete(Queue) -> lmq_lib:delete(name(Queue)).

%% Effective props: [{accum, Ms}, {retry, N}, {timeout, Secs}].
props(Queue) -> lmq_lib:get_properties(name(Queue)).

%% As LMQ's update_props: [] resets the queue's own props, anything else is
%% merged into them; a missing queue is created with them.
update_props(Queue) ->
    update_props(Queue, []).

update_props(Queue, Props) ->
    Name = name(Queue),
    case lmq_lib:queue_info(Name) of
        not_found ->
            lmq_lib:create(Name, lists:keysort(1, Props));
        _Own when Props =:= [] ->
            lmq_lib:update_queue_props(Name, []);
        Own ->
            lmq_lib:update_queue_props(Name, lmq_lib:extend(Props, Own))
    end.

%% [{Regex, Props}] with Regex a string or binary; the first match wins.
set_default_props(PatternProps) ->
    case valid_patterns(PatternProps) of
        true -> lmq_lib:set_lmq_info(default_props, PatternProps);
        false -> {error, invalid_syntax}
    end.

get_default_props() ->
    {ok, PatternProps} = lmq_lib:get_lmq_info(default_props, []),
    PatternProps.

status() -> lmq_console:status().

event_nodes() -> lmq_event:nodes().

received() -> lmq_event:received().

%% ------------------------------------------------------------------
%% Helpers
%% ------------------------------------------------------------------

ensure_queue(Queue) ->
    Name = name(Queue),
    case lmq_lib:queue_info(Name) of
        not_found -> ok = lmq_lib:create(Name);
        _ -> ok
    end,
    Name.

%% Binary names become atoms the way LMQ's APIs make them (latin1).
name(Name) when is_atom(Name) -> Name;
name(Name) when is_binary(Name) -> binary_to_atom(Name, latin1);
name(Name) when is_list(Name) -> list_to_atom(Name).

uuid(<<_:128>> = Uuid) -> Uuid;
uuid(Text) when is_binary(Text); is_list(Text) ->
    case uuid_from_text(Text) of
        {ok, Uuid} -> Uuid;
        error -> Text
    end;
uuid(Other) -> Other.

uuid_text(<<A:32, B:16, C:16, D:16, E:48>>) ->
    iolist_to_binary(io_lib:format("~8.16.0b-~4.16.0b-~4.16.0b-~4.16.0b-~12.16.0b",
                                   [A, B, C, D, E])).

uuid_from_text(Text) ->
    Hex = [C || C <- unicode:characters_to_list(Text), C =/= $-],
    try
        32 = length(Hex),
        {ok, <<(list_to_integer(Hex, 16)):128>>}
    catch
        _:_ -> error
    end.

valid_patterns(PatternProps) when is_list(PatternProps) ->
    lists:all(fun
        ({Regex, Props}) when (is_list(Regex) orelse is_binary(Regex)),
                              is_list(Props) ->
            element(1, re:compile(Regex)) =:= ok;
        (_) ->
            false
    end, PatternProps);
valid_patterns(_) ->
    false.

%% Queue operations over LMQ's Mnesia tables, for the interop test peer.
%%
%% This module answers to the same name, arities and return shapes as the
%% lmq_lib of an Erlang LMQ node (docs/lmq-contract.md#lmq_lib-calls), so a pylmq node can
%% drive it by rpc exactly as it would drive real LMQ. Every queue operation is
%% one Mnesia transaction on the calling node. Queue names are atoms; uuids are
%% 16-byte binaries; props are proplists with accum in ms and timeout in s.
-module(lmq_lib).

-include("lmq_peer.hrl").

-export([init_mnesia/0, create_admin_table/0,
         get_lmq_info/1, get_lmq_info/2, set_lmq_info/2,
         queue_info/1, update_queue_props/2, all_queue_names/0,
         create/1, create/2, delete/1,
         enqueue/2, enqueue/3, dequeue/2,
         done/2, retain/3, release/2, put_back/2,
         first/1, waittime/1,
         get_properties/1, get_properties/2,
         unixtime/0, new_uuid/0, extend/2]).

%% ------------------------------------------------------------------
%% Admin tables and cluster settings
%% ------------------------------------------------------------------

%% Only the first node of a cluster creates the admin tables; a node that
%% joined gets copies from the cluster instead.
init_mnesia() ->
    case mnesia:system_info(db_nodes) =:= [node()] of
        true -> create_admin_table();
        false -> ok
    end.

create_admin_table() ->
    Results = [create_table(?LMQ_INFO_TABLE,
                            [{type, set}, {record_name, lmq_info},
                             {attributes, record_info(fields, lmq_info)}]),
               create_table(?QUEUE_INFO_TABLE,
                            [{type, set}, {record_name, queue_info},
                             {attributes, record_info(fields, queue_info)}])],
    case [E || {error, _} = E <- Results] of
        [] -> ok;
        [Error | _] -> Error
    end.

create_table(Name, Def) ->
    case mnesia:create_table(Name, Def) of
        {atomic, ok} -> ok;
        {aborted, {already_exists, Name}} -> ok;
        {aborted, Reason} -> {error, Reason}
    end.

get_lmq_info(Key) ->
    transaction(fun() ->
        case mnesia:read(?LMQ_INFO_TABLE, Key) of
            [#lmq_info{value = Value}] -> {ok, Value};
            [] -> {error, not_found}
        end
    end).

get_lmq_info(Key, Default) ->
    case get_lmq_info(Key) of
        {ok, _} = Found -> Found;
        {error, _} -> {ok, Default}
    end.

set_lmq_info(Key, Value) ->
    transaction(fun() ->
        mnesia:write(?LMQ_INFO_TABLE, #lmq_info{key = Key, value = Value}, write)
    end).

%% ------------------------------------------------------------------
%% Queues
%% ------------------------------------------------------------------

%% The queue's own props (not merged with defaults), or not_found.
queue_info(Name) when is_atom(Name) ->
    transaction(fun() ->
        case mnesia:read(?QUEUE_INFO_TABLE, Name) of
            [#queue_info{props = Props}] -> Props;
            [] -> not_found
        end
    end).

update_queue_props(Name, Props) when is_atom(Name) ->
    write_queue_info(Name, Props).

all_queue_names() ->
    transaction(fun() -> mnesia:all_keys(?QUEUE_INFO_TABLE) end).

create(Name) when is_atom(Name) ->
    create(Name, []).

%% Creates the queue's table on every db node. Creating an existing queue with
%% other props replaces its props; either change is announced as queue_created
%% so other nodes pick it up.
create(Name, Props) when is_atom(Name) ->
    Def = [{type, ordered_set},
           {record_name, message},
           {attributes, record_info(fields, message)},
           {ram_copies, mnesia:system_info(db_nodes)}],
    case mnesia:create_table(Name, Def) of
        {atomic, ok} ->
            ok = write_queue_info(Name, Props),
            lmq_event:queue_created(Name);
        {aborted, {already_exists, Name}} ->
            case queue_info(Name) of
                Props -> ok;
                _ ->
                    ok = write_queue_info(Name, Props),
                    lmq_event:queue_created(Name)
            end;
        {aborted, Reason} ->
            {error, Reason}
    end.

%% Drops the queue and its messages; deleting an unknown queue is ok.
delete(Name) when is_atom(Name) ->
    _ = transaction(fun() -> mnesia:delete(?QUEUE_INFO_TABLE, Name, write) end),
    case mnesia:delete_table(Name) of
        {atomic, ok} -> lmq_event:queue_deleted(Name);
        {aborted, {no_exists, _}} -> ok;
        {aborted, Reason} -> {error, Reason}
    end.

write_queue_info(Name, Props) ->
    transaction(fun() ->
        mnesia:write(?QUEUE_INFO_TABLE, #queue_info{name = Name, props = Props}, write)
    end).

%% ------------------------------------------------------------------
%% Messages
%% ------------------------------------------------------------------

%% Content is {Metadata, Body}. Props are the queue's effective props; a
%% missing retry means unlimited deliveries. Returns ok, or {accum, new} /
%% {accum, yes} when the queue accumulates.
enqueue(Name, Content) ->
    enqueue(Name, Content, []).

enqueue(Name, Content, Props) ->
    Retry = one_more(proplists:get_value(retry, Props, infinity)),
    case proplists:get_value(accum, Props, 0) of
        Accum when Accum == 0 ->
            Msg = #message{id = {unixtime(), new_uuid()}, retry = Retry,
                           content = Content},
            transaction(fun() -> mnesia:write(Name, Msg, write) end);
        Accum ->
            transaction(fun() -> accumulate(Name, Content, Accum, Retry) end)
    end.

%% Appends to the accum record whose window is still open, or opens a window.
accumulate(Name, Content, AccumMs, Retry) ->
    mnesia:lock({table, Name}, write),
    Now = unixtime(),
    Open = [{#message{id = {'$1', '_'}, state = accum, _ = '_'},
             [{'>=', '$1', Now}], ['$_']}],
    case mnesia:select(Name, Open, write) of
        [#message{content = Items} = Msg | _] ->
            ok = mnesia:write(Name, Msg#message{content = Items ++ [Content]}, write),
            {accum, yes};
        [] ->
            Msg = #message{id = {Now + AccumMs / 1000, new_uuid()}, state = accum,
                           type = compound, retry = Retry, content = [Content]},
            ok = mnesia:write(Name, Msg, write),
            {accum, new}
    end.

%% Takes the first deliverable message: it is re-keyed under a fresh uuid with
%% its deadline (now + Timeout seconds) and one delivery less. Messages with no
%% delivery left are dropped on the way, one transaction each.
dequeue(Name, Timeout) ->
    case transaction(fun() -> take_first(Name, Timeout) end) of
        spent -> dequeue(Name, Timeout);
        Result -> Result
    end.

take_first(Name, Timeout) ->
    mnesia:lock({table, Name}, write),
    Now = unixtime(),
    case mnesia:first(Name) of
        '$end_of_table' ->
            empty;
        {TS, _} when TS > Now ->
            empty;
        Key ->
            [Msg] = mnesia:read(Name, Key, write),
            ok = mnesia:delete(Name, Key, write),
            case Msg#message.retry of
                R when R =:= infinity; R > 0 ->
                    Taken = Msg#message{id = {Now + Timeout, new_uuid()},
                                        state = processing, retry = one_less(R)},
                    ok = mnesia:write(Name, Taken, write),
                    Taken;
                _ ->
                    spent
            end
    end.

%% ack: removes a message being processed whose deadline has not passed.
done(Name, Uuid) ->
    with_processing(Name, Uuid, fun(_Now, Msg) ->
        mnesia:delete(Name, Msg#message.id, write)
    end).

%% ext: gives a message being processed Timeout more seconds from now.
retain(Name, Uuid, Timeout) ->
    with_processing(Name, Uuid, fun(Now, Msg) ->
        rekey(Name, Msg, Msg#message{id = {Now + Timeout, Uuid}})
    end).

%% nack: makes the message available again now; the delivery stays spent.
release(Name, Uuid) ->
    with_processing(Name, Uuid, fun(Now, Msg) ->
        rekey(Name, Msg, Msg#message{id = {Now, Uuid}, state = available})
    end).

%% Like release, for a delivery that never reached its client: the retry it
%% spent is given back.
put_back(Name, Uuid) ->
    with_processing(Name, Uuid, fun(Now, #message{retry = R} = Msg) ->
        rekey(Name, Msg, Msg#message{id = {Now, Uuid}, state = available,
                                     retry = one_more(R)})
    end).

%% Runs Fun on the processing message with that uuid if its deadline is not
%% past; anything else (unknown, expired, redelivered) is not_found.
with_processing(Name, Uuid, Fun) ->
    Now = unixtime(),
    transaction(fun() ->
        ByUuid = [{#message{id = {'_', Uuid}, _ = '_'}, [], ['$_']}],
        case mnesia:select(Name, ByUuid, write) of
            [#message{id = {TS, _}, state = processing} = Msg] when TS >= Now ->
                Fun(Now, Msg);
            _ ->
                not_found
        end
    end).

rekey(Name, Old, New) ->
    ok = mnesia:delete(Name, Old#message.id, write),
    mnesia:write(Name, New, write).

%% The first record of the queue, deliverable or not, or empty.
first(Name) ->
    transaction(fun() ->
        case mnesia:first(Name) of
            '$end_of_table' -> empty;
            Key -> hd(mnesia:read(Name, Key, read))
        end
    end).

%% Milliseconds until the first record is due (0 if it is), infinity if empty.
waittime(Name) ->
    case first(Name) of
        {error, _} = Error -> Error;
        empty -> infinity;
        #message{id = {TS, _}} -> max(0, round((TS - unixtime()) * 1000))
    end.

%% ------------------------------------------------------------------
%% Properties
%% ------------------------------------------------------------------

%% Effective props: the queue's own over the first default pattern matching its
%% name over the system defaults; sorted by key.
get_properties(Name) ->
    Base = default_props(Name),
    case queue_info(Name) of
        Own when is_list(Own) -> extend(Own, Base);
        _ -> Base
    end.

get_properties(Name, Override) ->
    extend(Override, get_properties(Name)).

default_props(Name) ->
    {ok, Patterns} = get_lmq_info(default_props, []),
    first_match(name_string(Name), Patterns).

first_match(_Name, []) ->
    ?SYSTEM_PROPS;
first_match(Name, [{Regex, Props} | Rest]) ->
    case catch re:run(Name, Regex, [{capture, none}]) of
        match -> extend(Props, ?SYSTEM_PROPS);
        _ -> first_match(Name, Rest)
    end.

name_string(Name) when is_atom(Name) -> atom_to_list(Name);
name_string(Name) -> Name.

%% Override's keys win over Base's; the result is sorted by key.
extend(Override, Base) ->
    lists:ukeysort(1, lists:reverse(Override) ++ Base).

%% ------------------------------------------------------------------
%% Helpers
%% ------------------------------------------------------------------

unixtime() ->
    os:system_time(microsecond) / 1.0e6.

%% A random (version 4, RFC 4122 variant) uuid as 16 bytes.
new_uuid() ->
    <<A:48, _:4, B:12, _:2, C:62>> = crypto:strong_rand_bytes(16),
    <<A:48, 4:4, B:12, 2:2, C:62>>.

one_more(infinity) -> infinity;
one_more(N) when is_integer(N) -> N + 1.

one_less(infinity) -> infinity;
one_less(N) -> N - 1.

transaction(Fun) ->
    case mnesia:transaction(Fun) of
        {atomic, Value} -> Value;
        {aborted, {no_exists, _}} -> {error, no_queue_exists};
        {aborted, Reason} -> {error, Reason}
    end.

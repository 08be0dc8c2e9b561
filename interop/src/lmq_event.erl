%% The lmq_event manager of the interop test peer.
%%
%% Like an Erlang LMQ node, the peer runs a gen_event manager registered as
%% lmq_event. Local events are {local, Event}; they are passed to every node in
%% the broadcast list as the message {notify, {remote, Event}} sent to that
%% node's lmq_event (which is what gen_event:notify({lmq_event, Node}, ...)
%% sends). Events: {join_node, Node}, {queue_created, Name},
%% {queue_deleted, Name}, {new_message, Name}.
%%
%% One handler (this module) does what LMQ splits over two: it keeps the
%% broadcast list and reacts to remote events by waking this node's pullers.
%% It also remembers the remote events it received, for tests to inspect.
-module(lmq_event).
-behaviour(gen_event).

-export([start_link/0, start_link/1, notify/1, notify_remote/2,
         queue_created/1, queue_deleted/1, new_message/1,
         add_node/1, nodes/0, received/0]).
-export([init/1, handle_event/2, handle_call/2, handle_info/2,
         terminate/2, code_change/3]).

%% How many received remote events are kept for received/0.
-define(KEEP_RECEIVED, 1000).

-record(state, {nodes = [] :: [node()], received = [] :: list()}).

%% ------------------------------------------------------------------
%% API
%% ------------------------------------------------------------------

%% Starts with the other running Mnesia nodes in the broadcast list and tells
%% each of them to add this node to theirs.
start_link() ->
    start_link([N || N <- mnesia:system_info(running_db_nodes), N =/= node()]).

start_link(Nodes) ->
    {ok, Pid} = gen_event:start_link({local, ?MODULE}),
    ok = gen_event:add_handler(?MODULE, ?MODULE, Nodes),
    {ok, Pid}.

notify(Event) ->
    gen_event:notify(?MODULE, {local, Event}).

notify_remote(Node, Event) ->
    gen_event:notify({?MODULE, Node}, {remote, Event}).

queue_created(Name) -> notify({queue_created, Name}).

queue_deleted(Name) -> notify({queue_deleted, Name}).

new_message(Name) -> notify({new_message, Name}).

%% Adds Node to this node's broadcast list (as a received join_node would).
add_node(Node) when is_atom(Node) ->
    gen_event:call(?MODULE, ?MODULE, {add_node, Node}).

%% This node's broadcast list.
nodes() ->
    gen_event:call(?MODULE, ?MODULE, nodes).

%% The remote events received so far (the last 1000), oldest first.
received() ->
    gen_event:call(?MODULE, ?MODULE, received).

%% ------------------------------------------------------------------
%% gen_event callbacks
%% ------------------------------------------------------------------

init(Nodes) ->
    broadcast(Nodes, {join_node, node()}),
    {ok, #state{nodes = Nodes}}.

handle_event({local, Event}, S = #state{nodes = Nodes}) ->
    broadcast(Nodes, Event),
    react(Event),
    {ok, S};
handle_event({remote, Event}, S = #state{received = Received}) ->
    S1 = S#state{received = lists:sublist([Event | Received], ?KEEP_RECEIVED)},
    case Event of
        {join_node, Node} when is_atom(Node) ->
            {ok, with_node(Node, S1)};
        _ ->
            react(Event),
            {ok, S1}
    end;
handle_event(_Other, S) ->
    {ok, S}.

handle_call({add_node, Node}, S) ->
    {ok, ok, with_node(Node, S)};
handle_call(nodes, S = #state{nodes = Nodes}) ->
    {ok, lists:reverse(Nodes), S};
handle_call(received, S = #state{received = Received}) ->
    {ok, lists:reverse(Received), S};
handle_call(_Other, S) ->
    {ok, {error, unknown_call}, S}.

handle_info(_Info, S) ->
    {ok, S}.

terminate(_Reason, _S) ->
    ok.

code_change(_OldVsn, S, _Extra) ->
    {ok, S}.

%% ------------------------------------------------------------------
%% Internals
%% ------------------------------------------------------------------

with_node(Node, S = #state{nodes = Nodes}) ->
    case Node =:= node() orelse lists:member(Node, Nodes) of
        true -> S;
        false -> S#state{nodes = [Node | Nodes]}
    end.

broadcast(Nodes, Event) ->
    lists:foreach(fun(Node) -> notify_remote(Node, Event) end, Nodes).

%% A new message or a deleted queue is worth a look by this node's pullers of
%% that queue, wherever it happened. Never crash here: a crashing handler
%% would silently leave the manager.
react({new_message, Name}) -> catch lmq_peer:wake(Name), ok;
react({queue_deleted, Name}) -> catch lmq_peer:wake(Name), ok;
react(_) -> ok.
